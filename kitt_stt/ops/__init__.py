"""Operations tooling: what a host can run, and where TensorRT engines live.

- ``gpu``: the NVIDIA GPUs this process can use (CUDA driver API through ctypes, nvidia-smi).
- ``libraries``: the onnxruntime build and the CUDA, cuDNN and TensorRT libraries it would load.
- ``model_files``: the configured models on disk and their sha256, without installing anything.
- ``trt_key``: the TensorRT engine cache key (pure: facts in, directory name out).
- ``trt_cache``: the keyed engine directory, its manifest, ``trt build`` into it and the lookup
  ``serve`` does before it builds the engine.
- ``doctor`` and ``report``: ``kitt-stt doctor``, the checks and their table / JSON.

Nothing here imports a GPU package: every probe degrades to "not found" on a CPU-only host.
"""
