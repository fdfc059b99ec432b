package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/relaymesh/relaymesh/pkg/linktls"
)

func (c *config) lookup(name, binName string) (string, error) {
	if p := c.paths[name]; p != "" {
		return checkExec(p)
	}
	if p, err := checkExec(filepath.Join(c.binDir, binName)); err == nil {
		return p, nil
	}
	if p, err := exec.LookPath(binName); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"} {
		if p, err := checkExec(filepath.Join(d, binName)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found (looked in -%s, %s, $PATH)", binName, name, c.binDir)
}

func checkExec(p string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not executable", p)
	}
	return filepath.Abs(p)
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

var specs = map[string]*kindSpec{
	"direct": {name: "direct", front: "none", maxHops: 0, note: "no relay: driver ceiling"},
	"copyrelay": {
		name: "copyrelay", front: "socks5", maxHops: -1,
		binary: func(c *config) (string, error) { return c.lookup("copyrelay", "copyrelay") },
		args: func(c *config, in *instance) ([]string, error) {
			a := []string{"-listen", addr(in.port)}
			if in.nextPort != 0 {
				a = append(a, "-next", addr(in.nextPort))
			}
			return a, nil
		},
	},
	"relayd":        relaydSpec("relayd", false),
	"relayd-http":   relaydSpec("relayd-http", true),
	"relayd-native": relaydNativeSpec("relayd-native", "plain"),
	"relayd-tls":    relaydNativeSpec("relayd-tls", "tls"),
	"relayd-tls-id": relaydNativeSpec("relayd-tls-id", "identity"),
	"glider-tls": {
		name: "glider-tls", front: "socks5", maxHops: -1, note: "TLS between relays (self-signed, not verified)",
		binary: func(c *config) (string, error) { return c.lookup("glider", "glider") },
		args: func(c *config, in *instance) ([]string, error) {
			listen := "socks5://" + addr(in.port)
			if in.idx > 0 {
				cert, key, err := benchCert(c.workDir)
				if err != nil {
					return nil, err
				}
				listen = "tls://" + addr(in.port) + "?cert=" + cert + "&key=" + key + ",socks5://"
			}
			a := []string{"-listen", listen, "-check", "disable"}
			if in.nextPort != 0 {
				a = append(a, "-forward", "tls://"+addr(in.nextPort)+"?skipVerify=true,socks5://")
			}
			return a, nil
		},
	},
	"glider": {
		name: "glider", front: "socks5", maxHops: -1,
		binary: func(c *config) (string, error) { return c.lookup("glider", "glider") },
		args: func(c *config, in *instance) ([]string, error) {
			a := []string{"-listen", "socks5://" + addr(in.port), "-check", "disable"}
			if in.nextPort != 0 {
				a = append(a, "-forward", "socks5://"+addr(in.nextPort))
			}
			return a, nil
		},
	},
	"stunnel": {
		// stunnel is a TLS tunnel, not a proxy: the entry takes the
		// client's bytes in clear and opens TLS to the next relay; a middle
		// relay ends that TLS and opens its own to the next (two services
		// joined over loopback); the exit ends TLS into microsocks, the
		// one SOCKS5 server of the chain, which dials the target.
		name: "stunnel", front: "socks5", maxHops: -1, minHops: 2,
		note: "TLS between relays (stunnel4, not verified); SOCKS5 by microsocks at the exit; needs 2+ hops",
		binary: func(c *config) (string, error) {
			if _, err := c.lookup("stunnel", "stunnel4"); err != nil {
				return "", err
			}
			if _, err := c.lookup("microsocks", "microsocks"); err != nil {
				return "", err
			}
			return "/bin/sh", nil
		},
		args: func(c *config, in *instance) ([]string, error) {
			stunnel, err := c.lookup("stunnel", "stunnel4")
			if err != nil {
				return nil, err
			}
			cert, key, err := benchCert(c.workDir)
			if err != nil {
				return nil, err
			}
			var b strings.Builder
			fmt.Fprintf(&b, "foreground = yes\npid =\noutput = %s\ndebug = 4\n", filepath.Join(in.dir, "stunnel.log"))
			b.WriteString("socket = l:TCP_NODELAY=1\nsocket = r:TCP_NODELAY=1\n")
			inner := in.alloc() // the loopback port between a relay's two sides
			if in.idx == 0 {
				fmt.Fprintf(&b, "[out]\nclient = yes\naccept = %s\nconnect = %s\n", addr(in.port), addr(in.nextPort))
			} else {
				fmt.Fprintf(&b, "[in]\ncert = %s\nkey = %s\naccept = %s\nconnect = %s\n", cert, key, addr(in.port), addr(inner))
				if in.nextPort != 0 {
					fmt.Fprintf(&b, "[out]\nclient = yes\naccept = %s\nconnect = %s\n", addr(inner), addr(in.nextPort))
				}
			}
			conf := filepath.Join(in.dir, "stunnel.conf")
			if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
				return nil, err
			}
			script := fmt.Sprintf("exec %s %s", stunnel, conf)
			if in.idx > 0 && in.nextPort == 0 {
				ms, err := c.lookup("microsocks", "microsocks")
				if err != nil {
					return nil, err
				}
				script = fmt.Sprintf("%s -i 127.0.0.1 -p %d & %s", ms, inner, script)
			}
			return []string{"-c", script}, nil
		},
	},
	"dante": {
		name: "dante", front: "socks5", maxHops: -1,
		binary: func(c *config) (string, error) { return c.lookup("danted", "danted") },
		args: func(c *config, in *instance) ([]string, error) {
			conf := filepath.Join(in.dir, "danted.conf")
			var b strings.Builder
			fmt.Fprintf(&b, "logoutput: %s\n", filepath.Join(in.dir, "danted.log"))
			fmt.Fprintf(&b, "internal: 127.0.0.1 port = %d\nexternal: 127.0.0.1\n", in.port)
			b.WriteString("clientmethod: none\nsocksmethod: none\n")
			b.WriteString("user.privileged: root\nuser.unprivileged: nobody\n")
			b.WriteString("client pass {\n  from: 127.0.0.0/8 to: 0.0.0.0/0\n}\n")
			b.WriteString("socks pass {\n  from: 0.0.0.0/0 to: 0.0.0.0/0\n  command: connect\n}\n")
			if in.nextPort != 0 {
				fmt.Fprintf(&b, "route {\n  from: 0.0.0.0/0 to: 0.0.0.0/0 via: 127.0.0.1 port = %d\n"+
					"  proxyprotocol: socks_v5\n  method: none\n}\n", in.nextPort)
			}
			if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
				return nil, err
			}
			return []string{"-f", conf, "-p", filepath.Join(in.dir, "danted.pid"), "-N", "1"}, nil
		},
	},
	"microsocks": {
		name: "microsocks", front: "socks5", maxHops: 1, note: "cannot chain",
		binary: func(c *config) (string, error) { return c.lookup("microsocks", "microsocks") },
		args: func(c *config, in *instance) ([]string, error) {
			return []string{"-i", "127.0.0.1", "-p", strconv.Itoa(in.port)}, nil
		},
	},
	"squid": {
		name: "squid", front: "http", maxHops: -1,
		binary: func(c *config) (string, error) { return c.lookup("squid", "squid") },
		args: func(c *config, in *instance) ([]string, error) {
			// squid drops root privileges to "proxy": it needs a writable dir.
			if err := os.Chmod(in.dir, 0o777); err != nil {
				return nil, err
			}
			conf := filepath.Join(in.dir, "squid.conf")
			var b strings.Builder
			fmt.Fprintf(&b, "http_port 127.0.0.1:%d\n", in.port)
			fmt.Fprintf(&b, "pid_filename %s\ncache_log %s\ncoredump_dir %s\n",
				filepath.Join(in.dir, "squid.pid"), filepath.Join(in.dir, "cache.log"), in.dir)
			b.WriteString("access_log none\ncache_store_log none\ncache deny all\ncache_mem 8 MB\n")
			b.WriteString("netdb_filename none\npinger_enable off\nicp_port 0\nhtcp_port 0\n")
			b.WriteString("dns_nameservers 127.0.0.1\nvisible_hostname relaybench\n")
			b.WriteString("shutdown_lifetime 0 seconds\nvia off\nforwarded_for delete\n")
			b.WriteString("http_access allow all\n")
			if in.nextPort != 0 {
				fmt.Fprintf(&b, "cache_peer 127.0.0.1 parent %d 0 no-query no-digest no-netdb-exchange default name=next\n", in.nextPort)
				b.WriteString("never_direct allow all\n")
			}
			if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
				return nil, err
			}
			return []string{"-N", "-f", conf}, nil
		},
	},
}

// relaydBinary is relayd's executable, unless -relayd-skip says why not.
func relaydBinary(c *config) (string, error) {
	if c.relaydSkip != "" {
		return "", errors.New(c.relaydSkip)
	}
	return c.lookup("relayd", "relayd")
}

func relaydSpec(name string, httpFront bool) *kindSpec {
	front := "socks5"
	if httpFront {
		front = "http"
	}
	return &kindSpec{
		name: name, front: front, maxHops: -1,
		binary: relaydBinary,
		args: func(c *config, in *instance) ([]string, error) {
			a := []string{"run", "--socks", addr(in.port), "--admin", addr(in.alloc()),
				"--allow-private", "--log-level", "warn"}
			if httpFront && in.idx == 0 {
				in.entryPort = in.alloc()
				a = append(a, "--http", addr(in.entryPort))
			} else {
				a = append(a, "--http", "") // the default 127.0.0.1:8080 would collide
			}
			if in.nextPort != 0 {
				a = append(a, "--next", "socks5://"+addr(in.nextPort))
			}
			return a, nil
		},
	}
}

// relaydNativeSpec: relayd chained with its native protocol over plain or
// TLS links, the latter with certificates derived from a fleet secret
// ("tls") or issued per relay by an operator CA ("identity"). The entry
// serves SOCKS5 and names every later relay in one header; the others
// serve only their relay listener.
func relaydNativeSpec(name, mode string) *kindSpec {
	note := map[string]string{
		"plain":    "native protocol, clear-text links",
		"tls":      "native protocol, TLS 1.3 links (fleet certificates)",
		"identity": "native protocol, TLS 1.3 links (per-relay certificates from an operator CA)",
	}[mode]
	return &kindSpec{
		name: name, front: "socks5", maxHops: -1, note: note,
		binary: relaydBinary,
		args: func(c *config, in *instance) ([]string, error) {
			a := []string{"run", "--admin", addr(in.alloc()), "--http", "", "--allow-private", "--log-level", "warn"}
			creds, err := relaydLinkFlags(c.workDir, mode, in.port)
			if err != nil {
				return nil, err
			}
			a = append(a, creds...)
			if in.idx == 0 {
				a = append(a, "--socks", addr(in.port))
				for _, p := range in.rest {
					hop := "relaymesh://" + addr(p)
					if mode == "identity" {
						hop += "?name=" + benchRelayName(p)
					}
					a = append(a, "--next", hop)
				}
			} else {
				a = append(a, "--socks", "", "--relay-listen", addr(in.port))
			}
			return a, nil
		},
	}
}

// addBaseKinds follows every relayd kind in kinds with its "@base" twin:
// the same chain with the -relayd-base binary, so two builds of relayd are
// compared side by side in one run, interleaved like every other kind.
func addBaseKinds(c *config, kinds []string) []string {
	var out []string
	for _, k := range kinds {
		out = append(out, k)
		if !strings.HasPrefix(k, "relayd") {
			continue
		}
		twin := *specs[k]
		twin.name = k + "@base"
		twin.binary = func(c *config) (string, error) { return checkExec(c.relaydBase) }
		label := c.baseLabel
		if label == "" {
			label = c.relaydBase
		}
		twin.note = strings.TrimPrefix(twin.note+"; ", "; ") + "relayd built from " + label
		specs[twin.name] = &twin
		out = append(out, twin.name)
	}
	return out
}

// benchRelayName is the name of the relay listening on port.
func benchRelayName(port int) string { return fmt.Sprintf("r%d", port) }

// relaydLinkFlags writes (once) what relayd's links need in dir and
// returns its flags: a fleet secret for plain and tls, an operator CA and
// the certificate of the relay on port for identity.
func relaydLinkFlags(dir, mode string, port int) ([]string, error) {
	if mode != "identity" {
		secret := filepath.Join(dir, "fleet-secret")
		if _, err := os.Stat(secret); err != nil {
			if err := os.WriteFile(secret, []byte("relaybench-fleet-secret-0123456789"), 0o600); err != nil {
				return nil, err
			}
		}
		return []string{"--fleet-secret-file", secret, "--transport", mode}, nil
	}
	caCert, caKey := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if _, err := os.Stat(caKey); err != nil {
		ca, err := linktls.NewCA("relaybench CA", 24*time.Hour)
		if err != nil {
			return nil, err
		}
		key, err := ca.KeyPEM()
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(caKey, key, 0o600); err != nil {
			return nil, err
		}
		if err := os.WriteFile(caCert, ca.CertPEM(), 0o644); err != nil {
			return nil, err
		}
	}
	certPEM, err := os.ReadFile(caCert)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(caKey)
	if err != nil {
		return nil, err
	}
	ca, err := linktls.LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	f, err := ca.WriteIdentity(dir, caCert, benchRelayName(port), linktls.RoleRelay, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	return f.Flags(), nil
}

// benchCert writes (once) a self-signed ECDSA certificate and key for the
// peers' TLS listeners and returns their paths.
func benchCert(dir string) (certPath, keyPath string, err error) {
	certPath, keyPath = filepath.Join(dir, "bench-cert.pem"), filepath.Join(dir, "bench-key.pem")
	if _, err := os.Stat(keyPath); err == nil {
		return certPath, keyPath, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	return certPath, keyPath, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
}
