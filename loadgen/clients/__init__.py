"""The wire clients: HTTP/1.1 (``http_client``), HTTP/2 frames (``http2``) and gRPC over them
(``grpc_client``), the slot interface both share (``slots``), the target server and model
(``target``), request payloads (``payloads``), response checks (``checks``) and the raw
last-byte-synchronised burst (``burst``)."""
