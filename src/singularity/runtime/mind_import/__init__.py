"""Mind import (spec §15.5): the document (`document`), importing it into a being (`apply`)
and a running being's local socket (`service`, which also carries operator requests)."""
