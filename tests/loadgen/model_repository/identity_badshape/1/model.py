"""Answers with one element more than its config promises."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            extra = np.zeros((x.shape[0], 1), dtype=x.dtype)
            out = pb_utils.Tensor("OUTPUT0", np.concatenate([x, extra], axis=1))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
