"""Blind: each 6x6 grid is multiplied by a fixed matrix and squashed, eight times over, and
the trace returned: CPU work per row in numpy, on any of three instances."""

import numpy as np
import triton_python_backend_utils as pb_utils

ROUNDS = 8
WEIGHTS = np.linspace(-0.5, 0.5, 36, dtype=np.float32).reshape(6, 6)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            grid = pb_utils.get_input_tensor_by_name(request, "GRID").as_numpy()
            for _ in range(ROUNDS):
                grid = np.tanh(grid @ WEIGHTS)
            trace = np.trace(grid, axis1=1, axis2=2).astype(np.float32).reshape(-1, 1)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("TRACE", trace)]))
        return responses
