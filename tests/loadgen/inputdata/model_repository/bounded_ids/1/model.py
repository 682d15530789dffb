"""IDS -> SUM per row; an error when an id is outside the vocabulary 0..999."""

import numpy as np
import triton_python_backend_utils as pb_utils

VOCABULARY = 1000


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            ids = pb_utils.get_input_tensor_by_name(request, "IDS").as_numpy()
            if ids.size and (ids.min() < 0 or ids.max() >= VOCABULARY):
                error = pb_utils.TritonError(f"id {int(ids.max())} is outside 0..999")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            total = ids.sum(axis=1, keepdims=True).astype(np.int64)
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SUM", total)])
            )
        return responses
