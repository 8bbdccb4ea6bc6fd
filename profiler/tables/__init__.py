"""Profile tables on disk: reading and merging writes under a lock, the device fingerprint a table records, and which tables may price which plans."""
