-- Configuration, not state: always logged, so permits survive a crash.
CREATE TABLE IF NOT EXISTS {permits} (
    name text COLLATE "C" NOT NULL,
    mode "char" NOT NULL CHECK (mode IN ('R', 'W')),
    permits integer NOT NULL CHECK (permits >= 1),
    PRIMARY KEY (name, mode))
