package client

// AttachAttempts is the number of attaches c has tried, for the tests.
func AttachAttempts(c *Client) uint64 { return c.sharing.attempts.Load() }
