"""Held out: counts of each token class (token mod 8) in a variable-length INT32 sequence."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS").as_numpy()
            counts = np.stack([np.bincount(row % 8, minlength=8)[:8] for row in np.abs(tokens)])
            tensor = pb_utils.Tensor("COUNTS", counts.astype(np.int32))
            out.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
        return out
