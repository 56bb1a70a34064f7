// Package harness is what the end-to-end tests under tests/ share: it
// builds dthrottled, the dthrottle CLI and the servers' modules once for
// every test package of a run (Main, Build), starts dthrottled on a
// configuration and waits until it answers (StartDaemon, RunDaemon),
// builds networks of hosts in network namespaces on internal/netns
// (NewLAN), starts the servers in front of the daemon on the shipped
// configurations of contrib/ (nginx, Apache, HAProxy, Caddy), drives a
// steady load on a cluster (StartLoad) and reads back what a daemon
// shows: its metrics, views and log.
//
// Each test package's TestMain calls Main. Helpers that take a
// *testing.T fail it, or skip it when a tool is missing outside CI
// (RequireTool). Paths into the repository go through Path.
package harness
