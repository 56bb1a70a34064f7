package api

import "testing"

// TestTopFind: a tag is found in its own policy's list only.
func TestTopFind(t *testing.T) {
	doc := Top{Policies: []TopPolicy{
		{Policy: "a", Tags: []TopTag{{Tag: "x", Count: 3}, {Tag: "y", Count: 2}}},
		{Policy: "b", Tags: []TopTag{{Tag: "y", Count: 9}}},
	}}
	for _, c := range []struct {
		policy, tag string
		count       uint64
		ok          bool
	}{
		{"a", "y", 2, true}, {"b", "y", 9, true}, {"b", "x", 0, false}, {"c", "x", 0, false},
	} {
		if tt, ok := doc.Find(c.policy, c.tag); ok != c.ok || tt.Count != c.count {
			t.Errorf("Find(%q, %q) = %+v, %v; want count %d, %v", c.policy, c.tag, tt, ok, c.count, c.ok)
		}
	}
}
