package rls

import (
	"context"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// healthService is the gRPC health service (grpc.health.v1.Health) that
// Envoy's gRPC health checks ask: the service "" and ServiceName are
// SERVING until the stop begins, NOT_SERVING after; another name is
// NOT_FOUND (Check) or SERVICE_UNKNOWN (Watch). Check and List are
// health.Server's; Watch is its own, so that a watch ends when the stop
// begins, after it has said NOT_SERVING, rather than holding the stop up
// until its grace ends.
type healthService struct {
	*health.Server
	stopped <-chan struct{} // closed once the statuses are NOT_SERVING
}

// Watch sends the service's status, then NOT_SERVING when the stop
// begins, and returns; or returns when the client goes.
func (h healthService) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	last := h.status(stream.Context(), req)
	if err := stream.Send(&healthpb.HealthCheckResponse{Status: last}); err != nil {
		return err
	}
	select {
	case <-stream.Context().Done():
		return status.FromContextError(stream.Context().Err()).Err()
	case <-h.stopped:
	}
	if st := h.status(stream.Context(), req); st != last {
		return stream.Send(&healthpb.HealthCheckResponse{Status: st})
	}
	return nil
}

// status is what Check says of the request's service, SERVICE_UNKNOWN
// for a service it does not know.
func (h healthService) status(ctx context.Context, req *healthpb.HealthCheckRequest) healthpb.HealthCheckResponse_ServingStatus {
	resp, err := h.Check(ctx, req)
	if err != nil {
		return healthpb.HealthCheckResponse_SERVICE_UNKNOWN
	}
	return resp.GetStatus()
}
