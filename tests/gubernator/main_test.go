package gubernator

import (
	"testing"

	"github.com/dthrottle/dthrottle/tests/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
