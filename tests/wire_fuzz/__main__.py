"""python -m tests.wire_fuzz [--seconds N] [--seed S] | --record-only | --replay FILE"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import harness, record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.wire_fuzz", description=__doc__)
    parser.add_argument("--seconds", type=float, default=60, help="the mutation budget (default 60)")
    parser.add_argument("--seed", type=int, default=None, help="the mutator's seed (default: a random one, printed)")
    parser.add_argument("--corpus", type=Path, default=harness.CORPUS, help="the corpus directory")
    parser.add_argument("--no-record", action="store_true",
                        help="mutate the committed sessions only (the run then depends on the seed and the corpus)")
    parser.add_argument("--settle", type=float, default=harness.SETTLE,
                        help=f"how long the target may take to come back to its baseline (default {harness.SETTLE:g} s)")
    parser.add_argument("--record-only", action="store_true",
                        help="record the sessions anew into the corpus and exit")
    parser.add_argument("--replay", type=Path, default=None,
                        help="replay one reproducer (a path, or a name in the corpus's reproducers) and check")
    args = parser.parse_args(argv)

    if args.record_only:
        port = harness.free_port()
        target = record.start_target(port)
        try:
            cases = record.record(port)
        finally:
            code = target.close()
            target.discard()
        if code != 0:
            print(f"the target exited with {code}", file=sys.stderr)
            return 1
        for path in harness.write_sessions(args.corpus, cases):
            print(f"wrote {path}")
        return 0

    if args.replay is not None:
        path = args.replay
        if not path.exists():
            path = args.corpus / harness.REPRODUCERS_DIR / path
        result = harness.replay(path, args.corpus, args.settle)
    else:
        seed = harness.random_seed() if args.seed is None else args.seed
        result = harness.run(args.seconds, seed, args.corpus, fresh=not args.no_record, settle=args.settle)
    for note in result.notes:
        print(note)
    if result.ok:
        print("wire fuzz: passed")
        return 0
    print(f"wire fuzz: FAILED ({'replay' if args.replay is not None else f'seed {result.seed}'}): {result.failure}")
    if result.reproducer is not None:
        print(f"wire fuzz: the input is in {result.reproducer}")
    return 1

if __name__ == "__main__":
    sys.exit(main())
