// Package image tests the container image of `make image` under podman,
// and the pod of deploy/kubernetes/dthrottle.yaml under `podman kube
// play`, as an operator runs them. The Debian packages are tests/install's:
// each package builds what it tests, within go test's time for one.
package image

import (
	"testing"

	"github.com/dthrottle/dthrottle/tests/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
