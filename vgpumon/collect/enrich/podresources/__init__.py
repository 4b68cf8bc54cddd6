"""The kubelet's pod-resources v1 gRPC API: the vendored ``api.proto`` and its generated stubs.

``api_pb2.py``, ``api_pb2.pyi`` and ``api_pb2_grpc.py`` are generated, never edited; from the
repository root, with the ``grpcio-tools`` version pinned in the ``dev`` extra::

    python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. \\
        vgpumon/collect/enrich/podresources/api.proto

``tests/collect/test_podresources_stubs.py`` runs that command and fails when the committed files
differ from what it produces. The generated code needs the ``kubernetes`` extra (grpcio,
protobuf) and is imported only when the kubelet enricher is configured.
"""
