"""The embedded gateway (`singularity brama serve`): an OpenAI-compatible server, its routes
to upstream gateways, and its local model through llama.cpp.

It needs the `[local]` extra (llama-cpp-python, Starlette, uvicorn). Only the `brama`
command imports it; a being reaches any gateway, this one included, through the client in
`singularity.gateway`.
"""
