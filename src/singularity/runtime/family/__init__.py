"""Child beings: spawning and funding them (`children`), and the family tree (`tree`)."""
