package harness

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/dthrottle/dthrottle/api"
)

// TopView reads d's GET /v1/top with the query q ("by=refused&scope=node").
func TopView(t *testing.T, d *Daemon, q string) api.Top {
	t.Helper()
	code, body := HTTPDo(t, http.MethodGet, "http://"+d.AdminAddr(t)+"/v1/top?"+q)
	var doc api.Top
	if err := json.Unmarshal([]byte(body), &doc); code != http.StatusOK || err != nil {
		t.Fatalf("/v1/top?%s: %d %v: %s", q, code, err, body)
	}
	return doc
}
