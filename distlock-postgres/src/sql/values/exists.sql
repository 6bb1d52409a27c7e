-- Whether the table of lease values exists (it is created on first use).
SELECT to_regclass('{values}') IS NOT NULL
