"""RAW -> A = 2 * RAW and B = RAW: the ensemble's preprocessing step, one batch at a time."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "RAW").as_numpy()
            a = pb_utils.Tensor("A", (2 * raw).astype(np.float32))
            b = pb_utils.Tensor("B", raw.astype(np.float32))
            out.append(pb_utils.InferenceResponse(output_tensors=[a, b]))
        return out
