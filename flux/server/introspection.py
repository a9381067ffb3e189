"""The standard services beside Flux's own: ``grpc.health.v1`` (Check, Watch and List) and reflection.

Two gaps in the installed grpcio add-ons are filled here:

- grpcio-health-checking's asyncio servicer answers ``List`` UNIMPLEMENTED,
  although reflection advertises it (the proto has it since 2024). ``Health``
  keeps its own copy of every status it sets and answers ``List`` from it.
- grpcio-reflection ships only ``grpc.reflection.v1alpha``; current clients
  (buf curl, grpcurl, Postman) ask for ``grpc.reflection.v1`` first. The v1
  protocol is v1alpha renamed: same messages, same field numbers, so the same
  servicer answers both, registered under the v1 name with v1alpha's
  (wire-identical) message classes. The v1 file descriptor is v1alpha's with
  the package renamed, added to the pool so v1 can describe itself too.
"""

from __future__ import annotations

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_health.v1 import health, health_pb2
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


class Health(health.aio.HealthServicer):
    """The library's servicer, plus ``List``: every service's status at once."""

    def __init__(self) -> None:
        super().__init__()
        # The base class starts with "" SERVING and keeps it in a private dict; mirror it here.
        self._statuses: dict[str, health_pb2.HealthCheckResponse.ServingStatus.ValueType] = {
            "": health_pb2.HealthCheckResponse.SERVING
        }
        self._shutting_down = False

    async def set(self, service: str, status: health_pb2.HealthCheckResponse.ServingStatus.ValueType) -> None:
        await super().set(service, status)
        if not self._shutting_down:
            self._statuses[service] = status

    async def enter_graceful_shutdown(self) -> None:
        self._shutting_down = True
        for service in self._statuses:
            self._statuses[service] = health_pb2.HealthCheckResponse.NOT_SERVING
        await super().enter_graceful_shutdown()

    async def List(
        self, request: health_pb2.HealthListRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthListResponse:
        return health_pb2.HealthListResponse(
            statuses={
                name: health_pb2.HealthCheckResponse(status=status) for name, status in self._statuses.items()
            }
        )


def _add_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    try:
        pool.FindFileByName(_V1_FILE)
        return  # another server in this process added it already
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    old, new = f".{proto.package}.", ".grpc.reflection.v1."
    proto.name, proto.package = _V1_FILE, "grpc.reflection.v1"
    proto.options.Clear()  # v1alpha's options name its own Java/Go packages
    for message in proto.message_type:
        for field in message.field:
            if field.HasField("type_name"):
                field.type_name = field.type_name.replace(old, new, 1)
    for method in proto.service[0].method:
        method.input_type = method.input_type.replace(old, new, 1)
        method.output_type = method.output_type.replace(old, new, 1)
    pool.Add(proto)


def enable_reflection(service_names: tuple[str, ...], server: grpc.aio.Server) -> None:
    """Serve reflection as v1 and v1alpha, both listing ``service_names`` and themselves."""
    names = (*service_names, reflection.SERVICE_NAME, REFLECTION_V1)
    pool = descriptor_pool.Default()
    _add_v1_descriptor(pool)
    servicer = reflection.aio.ReflectionServicer(names, pool=pool)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.method_handlers_generic_handler(
        REFLECTION_V1,
        {
            "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                servicer.ServerReflectionInfo,
                request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((v1,))
