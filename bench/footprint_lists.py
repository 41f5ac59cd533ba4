"""footprint_lists.py — docs/lab.md experiment 5's workload of python3 lists growing together: many
lists appended to in turn, round after round, as a program filling columns or per-key buckets
does. Each list's array grows by realloc, all of them through the same classes at once, so a
class's pages hold many arrays and empty only when all have moved on. Deterministic; prints one
JSON record."""
import argparse
import json


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lists", type=int, default=64)
    ap.add_argument("--items", type=int, default=40000, help="items appended to each list per round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    checksum = 0
    for _ in range(args.rounds):
        lists = [[] for _ in range(args.lists)]
        for i in range(args.items):
            for lst in lists:
                lst.append(i)
        checksum += sum(len(lst) for lst in lists)
        del lists
    print(json.dumps({"final": True, "lists": args.lists, "items": args.items, "rounds": args.rounds,
                      "checksum": checksum}))


if __name__ == "__main__":
    main()
