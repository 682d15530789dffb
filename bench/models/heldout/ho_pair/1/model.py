"""Held out: a fixed cost per execution (one 160x160 product, whatever the batch) and a
small one per row; served by two instances."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        rng = np.random.default_rng(13)
        self.w = rng.standard_normal((160, 160)).astype(np.float32) / 13
        self.v = rng.standard_normal((32, 32)).astype(np.float32) / 6

    def execute(self, requests):
        fixed = np.tanh(self.w @ self.w)  # the per-execution cost
        scale = np.float32(1 + fixed[0, 0] * 0)
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            y = np.tanh(x @ self.v) * scale
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", y)]))
        return out
