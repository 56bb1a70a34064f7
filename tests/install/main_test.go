// Package install tests what an operator installs from the Debian
// packages of packaging/debian: built with `make deb`, checked by
// lintian, installed with apt-get, their daemon and modules run, then
// upgraded, removed and purged. The container image and the pod are
// tests/image's.
package install

import (
	"testing"

	"github.com/dthrottle/dthrottle/tests/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
