-- The first store of a new boot (?1) starts a new epoch (?2): no fence of this boot can
-- equal one of an earlier boot, even one whose last commits a power loss undid.
INSERT INTO {boots} (id, boot, epoch) VALUES (1, ?1, ?2)
ON CONFLICT (id) DO UPDATE SET boot = excluded.boot, epoch = excluded.epoch
