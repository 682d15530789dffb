"""TEXT -> LENGTH (UTF-8 bytes) and UPPER; an error for bytes that are not UTF-8."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            try:
                upper = np.array(
                    [[s.decode("utf-8").upper().encode() for s in row] for row in text],
                    dtype=object,
                )
            except UnicodeDecodeError:
                error = pb_utils.TritonError("TEXT is not UTF-8")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            length = np.array([[len(s) for s in row] for row in text], dtype=np.int32)
            out = [pb_utils.Tensor("LENGTH", length), pb_utils.Tensor("UPPER", upper)]
            responses.append(pb_utils.InferenceResponse(output_tensors=out))
        return responses
