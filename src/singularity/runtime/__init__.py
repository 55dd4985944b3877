"""The runtime: a being opened for life (`being`), its money (`ledger`), and above them the
living loop (`loop`), the family of children (`family`), mind import (`mind_import`),
talking to a living being (`talk`) and inspecting a stopped one (`inspect`)."""
