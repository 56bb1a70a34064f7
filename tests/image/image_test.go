package image

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// This file owns the tests of the container image (`make image`) and of
// the DaemonSet's pod (deploy/kubernetes/dthrottle.yaml) under podman.

const image = "localhost/dthrottle:latest"

// podman runs podman with runc (crun refuses this machine's cgroup
// layout) and limits that an unprivileged container runtime may set, from
// a containers.conf of the test's own.
func podman(t *testing.T, args ...string) (string, error) {
	t.Helper()
	harness.RequireTool(t, "runc")
	harness.RequireTool(t, "catatonit")
	p := harness.RequireTool(t, "podman")
	conf := filepath.Join(t.TempDir(), "containers.conf")
	harness.Must(t, os.WriteFile(conf, []byte(`[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
runtime = "runc"
`), 0o644))
	cmd := exec.Command(p, args...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+conf)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustPodman(t *testing.T, args ...string) string {
	t.Helper()
	out, err := podman(t, args...)
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// buildImage runs `make image` once per test binary.
func buildImage(t *testing.T) {
	t.Helper()
	harness.RequireTool(t, "podman")
	harness.Build(t, "image", func(string) error {
		cmd := exec.Command("make", "image")
		cmd.Dir = harness.Path(".")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("make image: %v\n%s", err, out)
		}
		return nil
	})
	if out, err := podman(t, "image", "exists", image); err != nil {
		t.Fatalf("%s is not in podman's store after make image: %s", image, out)
	}
}

// socketDir makes a directory the container's user (65532) may write.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dthrottle-image-")
	harness.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	harness.Must(t, os.Chmod(dir, 0o777))
	return dir
}

// awaitSocket waits until sock answers a query.
func awaitSocket(t *testing.T, sock string, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !harness.FileExists(sock) {
		if time.Now().After(deadline) {
			t.Fatalf("no socket %s after 30s\n%s", sock, logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestImage runs the image as an operator does: a mounted configuration,
// the socket on a mounted directory, a TCP listener; queries both, then
// stops it with SIGTERM and checks it exited cleanly as a non-root user.
func TestImage(t *testing.T) {
	buildImage(t)
	dir := socketDir(t)
	port := harness.FreePort(t)
	conf := filepath.Join(dir, "dthrottle.toml")
	harness.Must(t, os.WriteFile(conf, []byte(fmt.Sprintf(`[listen]
unix = "/run/dthrottle/dthrottle.sock"
unix_mode = "0666"
tcp = "127.0.0.1:%d"
[limit]
rate = 0.001
burst = 3
`, port)), 0o644))
	name := fmt.Sprintf("dthrottle-test-%d", os.Getpid())
	t.Cleanup(func() { podman(t, "rm", "-f", name) })
	mustPodman(t, "run", "-d", "--name", name, "--network", "host",
		"-v", dir+":/run/dthrottle", "-v", conf+":/etc/dthrottle/dthrottle.toml:ro",
		image, "-config", "/etc/dthrottle/dthrottle.toml")
	logs := func() string { out, _ := podman(t, "logs", name); return out }
	sock := filepath.Join(dir, "dthrottle.sock")
	awaitSocket(t, sock, logs)
	if got := harness.NC(t, "a\na\na\na\n", "-U", sock); got != "OK\nOK\nOK\nNO\n" {
		t.Errorf("through the mounted socket: %q", got)
	}
	if got := harness.NC(t, "b\nb\nb\nb\n", "127.0.0.1", fmt.Sprint(port)); got != "OK\nOK\nOK\nNO\n" {
		t.Errorf("over TCP: %q", got)
	}
	if st, err := os.Stat(sock); err == nil {
		if uid := statUID(st); uid == 0 {
			t.Errorf("the socket is root's: the image runs as root")
		}
	}
	mustPodman(t, "stop", "-t", "10", name)
	if code := strings.TrimSpace(mustPodman(t, "inspect", name, "--format", "{{.State.ExitCode}}")); code != "0" {
		t.Errorf("exit code %s after SIGTERM\n%s", code, logs())
	}
	if l := logs(); !strings.Contains(l, "signal=terminated") || !strings.Contains(l, "msg=stopped") {
		t.Errorf("no clean stop on SIGTERM:\n%s", l)
	}
	if harness.FileExists(sock) {
		t.Errorf("the socket is left after the stop")
	}
}

// TestKubePlay runs the DaemonSet's pod template, with its ConfigMap,
// under podman kube play: the daemon answers through the socket on the
// hostPath. The pod runs with no network (the configuration's peers are
// a Service name that resolves only in a cluster), and the Secret's key
// is mounted from a host directory, as podman 4.3's kube play cannot
// mount a Secret.
func TestKubePlay(t *testing.T) {
	buildImage(t)
	b, err := os.ReadFile(harness.Path("deploy/kubernetes/dthrottle.yaml"))
	harness.Must(t, err)
	docs := map[string]string{}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		for _, line := range strings.Split(doc, "\n") {
			if kind, ok := strings.CutPrefix(line, "kind: "); ok {
				docs[kind] = doc
			}
		}
	}
	for _, kind := range []string{"Secret", "ConfigMap", "Service", "DaemonSet"} {
		if docs[kind] == "" {
			t.Fatalf("deploy/kubernetes/dthrottle.yaml has no %s", kind)
		}
	}
	run := socketDir(t)
	secrets := socketDir(t)
	key := ""
	for _, line := range strings.Split(docs["Secret"], "\n") {
		if v, ok := strings.CutPrefix(line, "  secret: "); ok {
			k, err := base64.StdEncoding.DecodeString(v)
			harness.Must(t, err)
			key = string(k)
		}
	}
	if key == "" {
		t.Fatal("the Secret has no key secret")
	}
	harness.Must(t, os.WriteFile(filepath.Join(secrets, "secret"), []byte(key), 0o440))
	harness.Must(t, os.Chown(filepath.Join(secrets, "secret"), 0, 65532))
	harness.Must(t, os.Chmod(secrets, 0o755))

	pod := podFromDaemonSet(t, docs["DaemonSet"], run, secrets)
	play := filepath.Join(t.TempDir(), "play.yaml")
	harness.Must(t, os.WriteFile(play, []byte(docs["ConfigMap"]+"\n---\n"+pod), 0o644))
	t.Cleanup(func() { podman(t, "kube", "play", "--down", play) })
	mustPodman(t, "kube", "play", "--network", "none", play)
	logs := func() string { out, _ := podman(t, "logs", "dthrottle-test-dthrottled"); return out }
	sock := filepath.Join(run, "dthrottle.sock")
	awaitSocket(t, sock, logs)
	if got := harness.NC(t, "k\n", "-U", sock); got != "OK\n" {
		t.Errorf("the pod's daemon answered %q\n%s", got, logs())
	}
}

// podFromDaemonSet makes a Pod of the DaemonSet's template: its lines
// under "  template:", the hostPath re-pointed to run and the Secret's
// volume to the host directory secrets.
func podFromDaemonSet(t *testing.T, ds, run, secrets string) string {
	t.Helper()
	_, tmpl, ok := strings.Cut(ds, "\n  template:\n")
	if !ok {
		t.Fatal("the DaemonSet has no template")
	}
	var pod strings.Builder
	pod.WriteString("apiVersion: v1\nkind: Pod\n")
	for _, line := range strings.Split(tmpl, "\n") {
		line = strings.TrimPrefix(line, "    ")
		pod.WriteString(line + "\n")
		if line == "metadata:" {
			pod.WriteString("  name: dthrottle-test\n")
		}
	}
	s := pod.String()
	for _, r := range [][2]string{
		{"path: /run/dthrottle\n", "path: " + run + "\n"},
		{"secret:\n      secretName: dthrottle-secret\n      defaultMode: 0440\n",
			"hostPath:\n      path: " + secrets + "\n      type: Directory\n"},
	} {
		if !strings.Contains(s, r[0]) {
			t.Fatalf("the DaemonSet's pod has no %q:\n%s", r[0], s)
		}
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	return s
}
