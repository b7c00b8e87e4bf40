"""Run the fuzz targets: under atheris, over saved inputs, or write their seed corpora.

From the repository root, with ``PYTHONPATH=$PWD`` (or mqttwire installed):

    python tests/fuzz/run.py seed DIR                 # DIR/<target>/seed-NNNN for every target
    python tests/fuzz/run.py fuzz TARGET [libFuzzer options] [CORPUS_DIR ...]
    python tests/fuzz/run.py replay TARGET PATH...    # files, or directories of them

``fuzz`` needs atheris (``pip install atheris``); it instruments the pure-Python code it
imports (mqttwire._pure, the shared modules, mqttwire.capture) for coverage, and checks
the Cython extension against it on every input.  ``replay`` needs no atheris and prints
how many inputs it ran; it is what scripts/sanitize.sh runs under AddressSanitizer.
See tests/fuzz/README.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _files(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in ("seed", "fuzz", "replay"):
        print(__doc__, file=sys.stderr)
        return 2
    command = argv[1]
    if command == "fuzz":
        import atheris

        with atheris.instrument_imports(include=["mqttwire"]):
            from fuzz_targets import TARGETS
        target = TARGETS[argv[2]]
        atheris.Setup([argv[0]] + argv[3:], target)
        atheris.Fuzz()
        return 0
    from fuzz_targets import TARGETS

    if command == "seed":
        from fuzz_seeds import seeds

        root = Path(argv[2])
        for name in TARGETS:
            folder = root / name
            folder.mkdir(parents=True, exist_ok=True)
            for i, data in enumerate(seeds(name)):
                (folder / f"seed-{i:04d}").write_bytes(data)
            print(f"{name}: {len(seeds(name))} seeds in {folder}")
        return 0
    target = TARGETS[argv[2]]
    files = _files(argv[3:])
    for f in files:
        try:
            target(f.read_bytes())
        except BaseException:
            print(f"FAILED on {f}", file=sys.stderr)
            raise
    print(f"{argv[2]}: {len(files)} inputs, no failures")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
