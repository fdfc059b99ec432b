package relay

import "crypto/subtle"

// credentials checks client usernames and passwords in constant time with
// respect to the password (and does the same work for unknown users).
type credentials struct {
	users map[string]string
}

func newCredentials(users map[string]string) *credentials {
	return &credentials{users: users}
}

func (c *credentials) enabled() bool { return len(c.users) > 0 }

func (c *credentials) check(user, pass string) bool {
	want, ok := c.users[user]
	if !ok {
		// Compare against something anyway so timing does not tell which
		// usernames exist.
		want = "\x00relaymesh-no-such-user"
	}
	eq := subtle.ConstantTimeCompare([]byte(pass), []byte(want)) == 1
	return ok && eq
}

func (c *credentials) checkProxyAuthorization(header string) bool {
	user, pass, ok := parseBasic(header)
	return ok && c.check(user, pass)
}
