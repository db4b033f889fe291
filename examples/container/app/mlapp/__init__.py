"""A small Django service with seed 002's memory shape, for recycler's container example.

GET /         -> "mlapp pid N": which gunicorn worker served it
GET /predict  -> loads the "model" on first use (MODEL_MIB, default 8), then keeps
                 LEAK_MIB (default 20) more per request in a module-level list: the
                 leak recycler's memory policy catches
GET /gradcam  -> holds SPIKE_MIB (default 150) for SPIKE_SECONDS (default 2), then
                 frees it: a legitimate spike the policy's `for:` must ride out
"""
