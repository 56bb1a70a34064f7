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

// TopFind returns tag's entry in doc's list of policy.
func TopFind(doc api.Top, policy, tag string) (api.TopTag, bool) {
	for _, p := range doc.Policies {
		if p.Policy != policy {
			continue
		}
		for _, tt := range p.Tags {
			if tt.Tag == tag {
				return tt, true
			}
		}
	}
	return api.TopTag{}, false
}
