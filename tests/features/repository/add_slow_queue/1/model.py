"""INPUT_A + INPUT_B, 50 ms per batch: slow enough for a small queue to fill."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.05)
        out = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT_A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT_B").as_numpy()
            tensor = pb_utils.Tensor("OUTPUT_SUM", (a + b).astype(np.float32))
            out.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
        return out
