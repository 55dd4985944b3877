"""The private journal: encrypted reflections with semantic recall, decay and promotion.

Entries are sealed with AES-256-GCM (`keyring`), embedded by a local model or the hashing
fallback (`embedders`), kept in SQLite or PostgreSQL (`store`), purged after the retention
window, and reached only through three private tools (`tools`). Nothing here ever writes
journal plaintext outside process memory.
"""
