"""Pairs of folder replacements that finish at the same moment, for tests/test_adversarial.py: in
each pair two processes fill a staging folder, meet at a barrier, then swap it in for a folder that
did not exist (`suite.results.atomic.replace_dir`). Processes, not threads: the race is between two
renames a few microseconds apart, which two cores run truly at once. Prints one line per error,
then `errors N`. Usage: python concurrent_swaps.py FOLDER PAIRS"""

import multiprocessing
import sys
from pathlib import Path

from suite.results import atomic


def swap(out: str, barrier, tag: str, errors) -> None:
    def fill(staging: Path) -> None:
        (staging / "page.md").write_text(tag)
        barrier.wait()

    try:
        atomic.replace_dir(Path(out), fill)
    except Exception as err:  # noqa: BLE001 - reported to the test
        errors.put(repr(err))


if __name__ == "__main__":
    fork = multiprocessing.get_context("fork")
    root, pairs = Path(sys.argv[1]), int(sys.argv[2])
    errors = fork.Queue()
    for i in range(pairs):
        barrier = fork.Barrier(2)
        procs = [fork.Process(target=swap, args=(str(root / f"r{i}"), barrier, tag, errors)) for tag in "ab"]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    count = 0
    while not errors.empty():
        print(errors.get())
        count += 1
    print(f"errors {count}")
