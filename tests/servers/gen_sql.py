#!/usr/bin/env python3
"""gen_sql.py OUT [ROWS] — writes the sqlite test's workload: tables with indexes, ROWS inserted
rows of text and blobs from a few bytes to 20 KiB, updates that grow and shrink them, deletes,
and queries (aggregates, joins, ORDER BY, GROUP BY, window functions, a recursive CTE) whose
printed output is compared between sqlite3 with and without frugal. Deterministic: no
random(), no time."""
import random
import sys


def main() -> None:
    out, rows = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40000
    rng = random.Random(20240601)
    w = []
    w.append("PRAGMA cache_size = -65536;")
    w.append("CREATE TABLE item(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, body BLOB, qty REAL);")
    w.append("CREATE TABLE tag(item_id INTEGER, tag TEXT);")
    w.append("CREATE INDEX item_grp ON item(grp, name);")
    w.append("CREATE INDEX tag_tag ON tag(tag);")
    for start in range(0, rows, 1000):
        w.append("BEGIN;")
        for i in range(start, min(rows, start + 1000)):
            size = rng.choice([4, 16, 100, 700, 3000, 20000]) + rng.randrange(50)
            name = "".join(rng.choice("abcdefghij") for _ in range(1 + rng.randrange(24)))
            w.append(f"INSERT INTO item VALUES({i}, {rng.randrange(97)}, '{name}', "
                     f"zeroblob({size}), {rng.randrange(100000) / 7:.4f});")
            for t in range(rng.randrange(3)):
                w.append(f"INSERT INTO tag VALUES({i}, 't{rng.randrange(300)}');")
        w.append("COMMIT;")
    w.append("BEGIN;")
    for _ in range(rows // 4):  # grow or shrink bodies and names: reallocation in the page cache
        i = rng.randrange(rows)
        w.append(f"UPDATE item SET body = zeroblob({rng.choice([1, 50, 5000, 30000])}), "
                 f"name = name || '{rng.randrange(1000)}' WHERE id = {i};")
    w.append("DELETE FROM item WHERE id % 7 = 3;")
    w.append("DELETE FROM tag WHERE item_id NOT IN (SELECT id FROM item);")
    w.append("COMMIT;")
    w.append(".mode list")
    w.append("SELECT count(*), sum(length(body)), round(sum(qty), 2) FROM item;")
    w.append("SELECT grp, count(*), max(length(name)), round(avg(qty), 3) FROM item GROUP BY grp ORDER BY grp;")
    w.append("SELECT t.tag, count(*) AS n FROM tag t JOIN item i ON i.id = t.item_id "
             "GROUP BY t.tag ORDER BY n DESC, t.tag LIMIT 40;")
    w.append("SELECT id, name, rank() OVER (PARTITION BY grp ORDER BY qty DESC, id) AS r FROM item "
             "WHERE grp < 5 ORDER BY grp, r LIMIT 200;")
    w.append("WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 20000) "
             "SELECT count(*), sum(x), group_concat(x % 10, '') IS NOT NULL FROM n;")
    w.append("SELECT name FROM item ORDER BY name DESC, id LIMIT 100;")
    w.append("SELECT substr(group_concat(name, ','), 1, 200) FROM (SELECT name FROM item ORDER BY id);")
    w.append("VACUUM;")
    w.append("PRAGMA integrity_check;")
    with open(out, "w") as f:
        f.write("\n".join(w) + "\n")


if __name__ == "__main__":
    main()
