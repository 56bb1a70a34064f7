package config

import (
	"fmt"
	"testing"
	"time"
)

// TestParsePer checks the limit-per-period form of [limit] and [[policy]]
// as a file writes it: the rate it gives, the burst it defaults, and the
// error naming both ways when a file writes both.
func TestParsePer(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		name      string
		src       string
		rate      float64 // of [limit], from Bucket
		burst     int
		policy    float64 // of policy[1], when there is one
		polBurst  int
		wantError string
	}{
		{name: "rate form unchanged", src: "[limit]\nrate = 2\nburst = 4\n", rate: 2, burst: 4},
		{name: "daily quota", src: "[limit]\nlimit = 1000\nper = \"24h\"\n", rate: 1000 / day.Seconds(), burst: 1000},
		{name: "daily quota, burst given", src: "[limit]\nlimit = 1000\nper = \"24h\"\nburst = 50\n", rate: 1000 / day.Seconds(), burst: 50},
		{name: "a minute", src: "[limit]\nlimit = 60\nper = \"1m\"\n", rate: 1, burst: 60},
		{name: "policy per", src: "[[policy]]\nprefix = \"k:\"\nlimit = 10\nper = \"10s\"\n", rate: 1, burst: 10, policy: 1, polBurst: 10},
		{name: "both in limit", src: "[limit]\nrate = 2\nlimit = 10\nper = \"1s\"\n",
			wantError: "config: line 2: limit.rate = 2: set either limit.rate, or limit.limit with limit.per, not both"},
		{name: "both in policy", src: "[[policy]]\nprefix = \"k:\"\nrate = 1\nburst = 1\nlimit = 10\nper = \"1s\"\n",
			wantError: "config: line 3: policy[1] (k:).rate = 1: set either policy[1] (k:).rate, or policy[1] (k:).limit with policy[1] (k:).per, not both"},
		{name: "limit without per", src: "[limit]\nlimit = 10\n",
			wantError: `config: line 1: limit.per = "0s": must be set with limit.limit: the period it is counted over, such as "24h"`},
		{name: "per without limit", src: "[limit]\nper = \"1h\"\n",
			wantError: "config: line 1: limit.limit = 0: must be set with limit.per: the requests allowed per period"},
		{name: "limit 0 with per", src: "[[policy]]\nprefix = \"k:\"\nper = \"1h\"\nlimit = 0\n",
			wantError: "config: line 4: policy[1] (k:).limit = 0: must be set with policy[1] (k:).per: the requests allowed per period"},
		{name: "limit negative", src: "[limit]\nlimit = -1\nper = \"1h\"\n",
			wantError: "config: line 2: limit.limit = -1: must be between 1 and 1000000 (requests per per)"},
		{name: "limit above the burst's bound", src: "[limit]\nlimit = 1000001\nper = \"1h\"\n",
			wantError: "config: line 2: limit.limit = 1000001: must be between 1 and 1000000 (requests per per)"},
		{name: "per below 1ms", src: "[limit]\nlimit = 1\nper = \"999us\"\n",
			wantError: `config: line 3: limit.per = "999µs": must be between 1ms and 8784h`},
		{name: "per above 366 days", src: "[limit]\nlimit = 1\nper = \"8785h\"\n",
			wantError: `config: line 3: limit.per = "8785h0m0s": must be between 1ms and 8784h`},
		{name: "per negative", src: "[limit]\nlimit = 1\nper = \"-1h\"\n",
			wantError: `config: line 3: limit.per = "-1h0m0s": must be between 1ms and 8784h`},
		{name: "a year's one", src: "[limit]\nlimit = 1\nper = \"8784h\"\n", rate: 1 / (366 * day).Seconds(), burst: 1},
		{name: "burst refills too slowly", src: "[limit]\nlimit = 1\nper = \"8784h\"\nburst = 100\n",
			wantError: "config: line 4: limit.burst = 100: must refill within 73 years at 3.1623e-08 tokens per second: lower it or raise the rate"},
		{name: "burst refills too slowly, rate form", src: "[limit]\nrate = 0.000001\nburst = 1000000\n",
			wantError: "config: line 3: limit.burst = 1000000: must refill within 73 years at 1e-06 tokens per second: lower it or raise the rate"},
		{name: "burst out of range with per", src: "[limit]\nlimit = 1\nper = \"1s\"\nburst = 1000001\n",
			wantError: "config: line 4: limit.burst = 1000001: must be between 1 and 1000000"},
		{name: "per not a duration", src: "[limit]\nlimit = 1\nper = 24\n",
			wantError: `config: line 3: limit.per: must be a duration string such as "1s" or "250ms", not an integer`},
	} {
		c, err := Parse([]byte(tc.src))
		if tc.wantError != "" {
			if fmt.Sprint(err) != tc.wantError {
				t.Errorf("%s: Parse = %v\nwant %s", tc.name, err, tc.wantError)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Parse: %v", tc.name, err)
			continue
		}
		if r, b := c.Limit.Bucket(); !near(r, tc.rate) || b != tc.burst {
			t.Errorf("%s: limit.Bucket() = %v, %d; want %v, %d", tc.name, r, b, tc.rate, tc.burst)
		}
		if len(c.Policy) > 0 {
			if r, b := c.Policy[0].Bucket(); !near(r, tc.policy) || b != tc.polBurst {
				t.Errorf("%s: policy[1].Bucket() = %v, %d; want %v, %d", tc.name, r, b, tc.policy, tc.polBurst)
			}
		}
	}
}

func near(a, b float64) bool { return a == b || (a-b)/b < 1e-12 && (b-a)/b < 1e-12 }

// TestParseQuotas checks the quotas key of [limit] and [[policy]]: its
// default, its three values and the error for any other.
func TestParseQuotas(t *testing.T) {
	for _, tc := range []struct {
		src         string
		limit, pol  string
		wantError   string
		wantPolicyQ bool
	}{
		{src: "", limit: "any"},
		{src: "[limit]\nquotas = \"lower\"\n", limit: "lower"},
		{src: "[limit]\nquotas = \"none\"\n", limit: "none"},
		{src: "[[policy]]\nprefix = \"k:\"\nrate = 1\nburst = 1\n", limit: "any", pol: "any"},
		{src: "[limit]\nquotas = \"none\"\n[[policy]]\nprefix = \"k:\"\nrate = 1\nburst = 1\nquotas = \"lower\"\n", limit: "none", pol: "lower"},
		{src: "[limit]\nquotas = \"some\"\n", wantError: `config: line 2: limit.quotas = "some": must be one of "any", "lower", "none"`},
		{src: "[limit]\nquotas = \"\"\n", wantError: `config: line 2: limit.quotas = "": must be one of "any", "lower", "none"`},
		{src: "[[policy]]\nprefix = \"k:\"\nrate = 1\nburst = 1\nquotas = \"Any\"\n",
			wantError: `config: line 5: policy[1] (k:).quotas = "Any": must be one of "any", "lower", "none"`},
		{src: "[limit]\nquotas = 1\n", wantError: "config: line 2: limit.quotas: must be a string, not an integer"},
	} {
		c, err := Parse([]byte(tc.src))
		if tc.wantError != "" {
			if fmt.Sprint(err) != tc.wantError {
				t.Errorf("Parse(%q) = %v\nwant %s", tc.src, err, tc.wantError)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.src, err)
			continue
		}
		if c.Limit.Quotas != tc.limit {
			t.Errorf("Parse(%q): limit.quotas = %q, want %q", tc.src, c.Limit.Quotas, tc.limit)
		}
		if len(c.Policy) > 0 && c.Policy[0].Quotas != tc.pol {
			t.Errorf("Parse(%q): policy[1].quotas = %q, want %q", tc.src, c.Policy[0].Quotas, tc.pol)
		}
	}
}

// TestValidatePerInCode checks a Config built in code, not parsed: the
// default's rate beside a limit is both ways at once.
func TestValidatePerInCode(t *testing.T) {
	c := Default()
	c.Limit.Limit, c.Limit.Per = 100, Duration{time.Hour}
	want := "config: limit.rate = 1: set either limit.rate, or limit.limit with limit.per, not both"
	if err := c.Validate(); fmt.Sprint(err) != want {
		t.Errorf("Validate() = %v, want %s", err, want)
	}
	c.Limit.Rate = 0
	if err := c.Validate(); err != nil {
		t.Errorf("limit 100 per 1h, burst 10: %v", err)
	}
	if r, b := c.Limit.Bucket(); !near(r, 100.0/3600) || b != 10 {
		t.Errorf("Bucket() = %v, %d, want %v, 10", r, b, 100.0/3600)
	}
	c.Policy = []Policy{{Prefix: "a:", Action: ActionAllow, Rate: -1, Limit: -1, Quotas: "bad"}}
	if err := c.Validate(); err != nil {
		t.Errorf("an allowing policy's unused limit and quotas: %v", err)
	}
}
