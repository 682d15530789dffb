"""A compute-heavy model: a ReLU MLP, 64 -> 2048 -> 2048 -> 16, in numpy, seeded weights.

Every formed batch is one pass through the network: the rows of all its requests are
stacked and multiplied together. The 2048 x 2048 middle layer (16 MB of FP32) is read once
per execution, so the cost grows sub-linearly with the batch size (measured single-
threaded on this project's CPU: about 1.3 ms for 1 row, 3.4 ms for 4, 6 ms for 16). BLAS
runs on one thread so that one execution is one core's work, as the advisor models it.
The weights come from a fixed seed: the same input gives the same output on every server.
"""

import ctypes
import glob
import os

import numpy as np
import triton_python_backend_utils as pb_utils

SEED = 20241130
SIZES = (64, 2048, 2048, 16)


def _one_blas_thread():
    """numpy's bundled OpenBLAS on one thread (its env variable is read before we run)."""
    libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "*openblas*")
    for path in glob.glob(libs):
        lib = ctypes.CDLL(path)
        for name in ("openblas_set_num_threads64_", "openblas_set_num_threads"):
            setter = getattr(lib, name, None)
            if setter is not None:
                setter(1)
                return


def weights(seed=SEED):
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((n_in, n_out), dtype=np.float32) / np.sqrt(n_in)).astype(
            np.float32
        )
        for n_in, n_out in zip(SIZES, SIZES[1:])
    ]


def forward(layers, x):
    for i, w in enumerate(layers):
        x = x @ w
        if i < len(layers) - 1:
            x = np.maximum(x, 0.0)
    return x


class TritonPythonModel:
    def initialize(self, args):
        _one_blas_thread()
        self.layers = weights()

    def execute(self, requests):
        responses = [None] * len(requests)
        parts, good = [], []
        for i, request in enumerate(requests):
            x = pb_utils.get_input_tensor_by_name(request, "INPUT")
            x = None if x is None else x.as_numpy()
            if x is None or x.ndim != 2 or x.shape[1] != SIZES[0]:
                error = f"INPUT must be [rows, {SIZES[0]}] FP32"
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(error))
                continue
            parts.append(x)
            good.append(i)
        if good:
            out = forward(self.layers, np.concatenate(parts).astype(np.float32, copy=False))
            bounds = np.cumsum([len(p) for p in parts])[:-1]
            for i, rows in zip(good, np.split(out, bounds)):
                tensor = pb_utils.Tensor("OUTPUT", rows.astype(np.float32, copy=False))
                responses[i] = pb_utils.InferenceResponse(output_tensors=[tensor])
        return responses

    def finalize(self):
        pass
