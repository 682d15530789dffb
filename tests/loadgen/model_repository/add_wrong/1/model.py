"""Returns INPUT_A - INPUT_B as OUTPUT_SUM: well-formed answers that are wrong."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT_A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT_B").as_numpy()
            out = pb_utils.Tensor("OUTPUT_SUM", (a - b).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
