"""gen_lines.py — write a deterministic file of random text lines (the input of the `sort`
test under LD_PRELOAD). Usage: gen_lines.py OUT MIB"""
import random
import sys


def main(out: str, mib: int) -> None:
    rng = random.Random(20240601)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,.-"
    target = mib << 20
    written = 0
    with open(out, "w", encoding="ascii") as f:
        while written < target:
            line = "".join(rng.choices(alphabet, k=rng.randint(1, 200))) + "\n"
            f.write(line)
            written += len(line)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
