"""GPU acceptance run: ``acceptance.sh`` (thin wrapper) and ``acceptance.py`` (the steps).

``steps`` runs steps in order and stops at the first failure; ``placement`` reads onnxruntime
profiles to tell which provider ran each node; ``session_probe`` creates and times one session in
its own process; ``install`` plans the pip commands; ``latency`` drives servers per provider;
``summary`` prints the one results table. See docs/deployment-gpu.md, "GPU acceptance".
"""
