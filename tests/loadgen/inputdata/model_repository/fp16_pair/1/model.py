"""X [4] and Y [2,3], FP16 -> TOTAL, the sum of both per row; an error on NaN or infinity."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            y = pb_utils.get_input_tensor_by_name(request, "Y").as_numpy()
            if not (np.isfinite(x).all() and np.isfinite(y).all()):
                error = pb_utils.TritonError("X or Y holds NaN or infinity")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            n = x.shape[0]
            total = x.astype(np.float32).reshape(n, -1).sum(1) + y.astype(np.float32).reshape(
                n, -1
            ).sum(1)
            out = pb_utils.Tensor("TOTAL", total.reshape(n, 1).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
