"""Business resource locks: TTL rows acquired by one compare-and-set statement."""
