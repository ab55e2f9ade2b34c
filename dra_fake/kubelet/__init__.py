"""The kubelet-facing gRPC layer: plugin registration, the DRA service (v1, v1beta1), the health
service, socket paths; our own .proto files and the stubs grpcio-tools generates (pb/)."""
