// Package install tests what an operator installs: the Debian packages
// of packaging/debian (built with `make deb`, installed with apt-get,
// their daemon and modules run, then removed and purged), the container
// image of `make image` under podman, and the pod of
// deploy/kubernetes/dthrottle.yaml under `podman kube play`.
package install

import (
	"testing"

	"github.com/dthrottle/dthrottle/tests/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
