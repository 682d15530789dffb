"""Held out: each row goes through four 640x640 products on its own (a loop over rows), so
a batch costs about its rows times one row: a cost per row larger than the fixed cost."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        rng = np.random.default_rng(11)
        self.w = rng.standard_normal((640, 640)).astype(np.float32) / 20

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            rows = []
            for row in x:
                for _ in range(4):
                    row = np.tanh(self.w @ row)
                rows.append(row[:4])
            tensor = pb_utils.Tensor("Y", np.stack(rows).astype(np.float32))
            out.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
        return out
