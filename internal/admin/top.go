package admin

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/dthrottle/dthrottle/api"
)

// GET /v1/top: the heaviest tags per policy, read through Sources.Top.

// The /v1/top parameters' values and limits.
const (
	topDefaultN = 20
	topMaxN     = 100
)

var (
	topBys    = []string{"refused", "served"}
	topScopes = []string{"cluster", "node"}
)

// topQuery is a /v1/top request's parameters.
type topQuery struct {
	by, scope, policy string
	n                 int
}

// parseTopQuery reads q's by, scope, policy and n, with their defaults.
// policies are the names a policy parameter may take. The error says what
// is wrong, for the 400 answer.
func parseTopQuery(q url.Values, policies []string) (topQuery, error) {
	t := topQuery{by: topBys[0], scope: topScopes[0], n: topDefaultN}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		vs := q[k]
		if !slices.Contains([]string{"by", "scope", "policy", "n"}, k) {
			return t, fmt.Errorf("unknown parameter %q: want by, scope, policy or n", k)
		}
		if len(vs) > 1 {
			return t, fmt.Errorf("parameter %s given %d times", k, len(vs))
		}
	}
	if q.Has("by") {
		t.by = q.Get("by")
		if !slices.Contains(topBys, t.by) {
			return t, fmt.Errorf("by=%q: want refused or served", t.by)
		}
	}
	if q.Has("scope") {
		t.scope = q.Get("scope")
		if !slices.Contains(topScopes, t.scope) {
			return t, fmt.Errorf("scope=%q: want cluster or node", t.scope)
		}
	}
	if t.policy = q.Get("policy"); t.policy != "" && !slices.Contains(policies, t.policy) {
		return t, fmt.Errorf("policy=%q: no such policy", t.policy)
	}
	if q.Has("n") {
		n, err := strconv.Atoi(q.Get("n"))
		if err != nil || n < 1 || n > topMaxN {
			return t, fmt.Errorf("n=%q: want a whole number from 1 to %d", q.Get("n"), topMaxN)
		}
		t.n = n
	}
	return t, nil
}

func (s *Server) top(w http.ResponseWriter, r *http.Request) {
	snap := s.src.Snapshot()
	names := make([]string, len(snap.Policies))
	for i, p := range snap.Policies {
		names[i] = p.Name
	}
	q, err := parseTopQuery(r.URL.Query(), names)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, s.topDoc(q))
}

// topDoc reads Sources.Top and holds its answer to q: the by and scope
// asked, only the policy asked (when one was), at most n tags each, tags
// as JSON text, and empty arrays rather than null. Without Sources.Top it
// is a document with no policies.
func (s *Server) topDoc(q topQuery) api.Top {
	doc := api.Top{By: q.by, Scope: q.scope}
	if s.src.Top != nil {
		doc = s.src.Top(q.by, q.scope, q.policy, q.n)
		doc.By, doc.Scope = q.by, q.scope
	}
	pols := make([]api.TopPolicy, 0, len(doc.Policies))
	for _, p := range doc.Policies {
		if q.policy != "" && p.Policy != q.policy {
			continue
		}
		tags := make([]api.TopTag, 0, min(len(p.Tags), q.n))
		for _, t := range p.Tags[:min(len(p.Tags), q.n)] {
			t.Tag, t.Escaped = printable(t.Tag)
			tags = append(tags, t)
		}
		p.Tags = tags
		pols = append(pols, p)
	}
	doc.Policies = pols
	return doc
}
