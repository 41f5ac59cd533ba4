-- footprint.sql — docs/lab.md experiment 5's sqlite3 workload, for `sqlite3 :memory:` with the row
-- count bound first (.parameter set @rows N): two tables, two indexes, joins, group_concat,
-- CREATE TABLE AS, an update that grows rows, a delete of half of them, VACUUM. Rows are made
-- by recursive CTEs from their number alone (deterministic, no file to generate). Query
-- results go to /dev/null; the last line is the JSON record the lab reads.
.output /dev/null
CREATE TABLE customer(id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer INTEGER NOT NULL, item TEXT NOT NULL,
                    qty INTEGER NOT NULL, note TEXT);
CREATE INDEX orders_by_customer ON orders(customer, qty);
CREATE INDEX orders_by_item ON orders(item);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < @rows / 10)
INSERT INTO customer SELECT i, printf('customer %06d %.*c', i, i % 40, 'x'), 'city ' || (i % 97) FROM n;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < @rows)
INSERT INTO orders SELECT i, 1 + (i * 7919) % (@rows / 10), 'item-' || ((i * 104729) % 4999), 1 + i % 17,
                          printf('%.*c', (i * 31) % 300, 'n') FROM n;
SELECT c.city, count(*), sum(o.qty) FROM customer c JOIN orders o ON o.customer = c.id
  GROUP BY c.city ORDER BY 2 DESC;
SELECT o.item, group_concat(c.name, ';') FROM orders o JOIN customer c ON c.id = o.customer
  GROUP BY o.item;
CREATE TABLE item_buyers AS
  SELECT o.item, count(DISTINCT o.customer) AS buyers, group_concat(DISTINCT c.city) AS cities
  FROM orders o JOIN customer c ON c.id = o.customer GROUP BY o.item;
UPDATE orders SET note = note || note || note WHERE id % 3 = 0;
DELETE FROM orders WHERE id % 2 = 0;
CREATE TABLE bought AS
  SELECT customer, group_concat(item, ',') AS items, sum(qty) AS qty FROM orders GROUP BY customer;
VACUUM;
.output stdout
SELECT json_object('final', json('true'), 'orders', (SELECT count(*) FROM orders),
                   'items', (SELECT count(*) FROM item_buyers), 'customers', (SELECT count(*) FROM bought));
