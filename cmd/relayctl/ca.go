package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/relaymesh/relaymesh/pkg/envvar"
	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/relay"
)

// The files of an operator CA's directory (relayctl ca init).
const (
	caCertFile = "ca.crt"
	caKeyFile  = "ca.key"
	caCRLFile  = "revoked.crl"
)

func caCmd() *cobra.Command {
	var secretFile string
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "The fleet's certificate authority: make one, issue identities, revoke them",
		Long: `A fleet on the internet runs on identities from a CA the operator keeps on
their own machine, never on a relay:

  relayctl ca init --dir ca/                          # once: ca/ca.crt, ca/ca.key
  relayctl ca issue --dir ca/ --name tokyo            # one per relay: tokyo.crt, tokyo.key
  relayctl ca issue --dir ca/ --name alice --role client   # one per relayctl user
  relayctl ca revoke --dir ca/ ca/osaka.crt           # ca/revoked.crl, for every relay

Each relay holds only its own key: relay links and admin calls check the
peer's certificate names the relay they meant, so a compromised relay can be
itself, never another relay, and mints nothing. A client certificate reaches
relays (relayctl plan, bench, connect) and is never taken for a relay.
docs/deploy.md walks through a deployment.

Without a subcommand, ca prints the CA certificate derived from a fleet secret
(for a fleet that shares one: labs and trusted networks), for tools that read
the relays' admin APIs over HTTPS.`,
		Example: `  relayctl ca --fleet-secret-file fleet.key > fleet-ca.pem
  curl --cacert fleet-ca.pem --connect-to tokyo:9090:203.0.113.7:9090 \
    -H "Authorization: Bearer $TOKEN" https://tokyo:9090/metrics
  # prometheus.yml: scheme: https, tls_config: {ca_file: fleet-ca.pem, server_name: tokyo}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if secretFile == "" {
				secretFile = envOr(envvar.FleetSecretFile, "")
			}
			if secretFile == "" {
				return errors.New("--fleet-secret-file is required to print a secret's CA (the CA is derived from the fleet secret); for an operator CA see relayctl ca init --help")
			}
			secret, err := (&relay.Config{FleetSecretFile: secretFile}).LoadFleetSecret()
			if err != nil {
				return err
			}
			pem, err := linktls.CAPEM(secret)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(pem)
			return err
		},
	}
	cmd.Flags().StringVar(&secretFile, "fleet-secret-file", "", "the fleet secret file (default $"+envvar.FleetSecretFile+")")
	cmd.AddCommand(caInitCmd(), caIssueCmd(), caRevokeCmd())
	return cmd
}

func caInitCmd() *cobra.Command {
	var dir, name string
	var days int
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Make an operator CA: its certificate (give it to every relay and user) and key (keep it here)",
		Long: `Make a CA in --dir: ca.crt, public, which every relay and relayctl user gets a
copy of, and ca.key, which signs identities and must stay on the operator's
machine (mode 600). An existing CA is never overwritten.`,
		Example: `  relayctl ca init --dir ~/relaymesh-ca`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if days < 1 {
				return fmt.Errorf("--days %d: want 1 or more", days)
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			for _, f := range []string{caCertFile, caKeyFile} {
				if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
					return fmt.Errorf("%s already exists: a CA is made once (every identity it issued would be lost)", filepath.Join(dir, f))
				}
			}
			ca, err := linktls.NewCA(name, time.Duration(days)*24*time.Hour)
			if err != nil {
				return err
			}
			key, err := ca.KeyPEM()
			if err != nil {
				return err
			}
			if err := writeNew(filepath.Join(dir, caKeyFile), key, 0o600); err != nil {
				return err
			}
			if err := writeNew(filepath.Join(dir, caCertFile), ca.CertPEM(), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "CA %q made: %s (copy to every relay and user), %s (keep here, never on a relay)\n",
				ca.Cert.Subject.CommonName, filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile))
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".", "directory to make the CA in")
	cmd.Flags().StringVar(&name, "name", "relaymesh operator CA", "the CA's name, as its certificate shows it")
	cmd.Flags().IntVar(&days, "days", int(linktls.DefaultCALifetime/(24*time.Hour)), "how long the CA is valid, days")
	return cmd
}

func caIssueCmd() *cobra.Command {
	var dir, name, role, out string
	var days int
	cmd := &cobra.Command{
		Use:   "issue",
		Short: "Issue a relay (or a relayctl user) its certificate and key",
		Long: `Issue NAME.crt and NAME.key into --out (default: the CA's directory), and
copy ca.crt beside them. A relay's name is the one the registry knows it by
(relayd's name); the certificate says it, and peers check it. --role client
makes an identity for a relayctl user: it reaches relays' links and admin APIs
(plan, bench, connect), and no relay takes it for a relay. An existing file is
never overwritten: revoke an identity, then issue a new one.`,
		Example: `  relayctl ca issue --dir ~/relaymesh-ca --name tokyo --out ./tokyo
  scp -r ./tokyo tokyo-vps:/etc/relaymesh/identity     # tokyo.crt, tokyo.key, ca.crt
  relayctl ca issue --dir ~/relaymesh-ca --name alice --role client --out ~/.relaymesh`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return errors.New("--name is required: the relay's name (or the user's, with --role client)")
			}
			if days < 1 {
				return fmt.Errorf("--days %d: want 1 or more", days)
			}
			ca, err := loadCA(dir)
			if err != nil {
				return err
			}
			cert, key, err := ca.Issue(name, role, time.Duration(days)*24*time.Hour)
			if err != nil {
				return err
			}
			if out == "" {
				out = dir
			}
			if err := os.MkdirAll(out, 0o700); err != nil {
				return err
			}
			certPath, keyPath := filepath.Join(out, name+".crt"), filepath.Join(out, name+".key")
			if err := writeNew(keyPath, key, 0o600); err != nil {
				return err
			}
			if err := writeNew(certPath, cert, 0o644); err != nil {
				return err
			}
			if filepath.Clean(out) != filepath.Clean(dir) {
				if err := os.WriteFile(filepath.Join(out, caCertFile), ca.CertPEM(), 0o644); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %q issued: %s, %s (mode 600), with %s\n", role, name, certPath, keyPath, filepath.Join(out, caCertFile))
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".", "the CA's directory (relayctl ca init)")
	cmd.Flags().StringVar(&name, "name", "", "the relay's name (as relayd's name and the registry say it), or the user's")
	cmd.Flags().StringVar(&role, "role", linktls.RoleRelay, "relay, or client for a relayctl user")
	cmd.Flags().StringVar(&out, "out", "", "directory to write NAME.crt, NAME.key and ca.crt to (default --dir)")
	cmd.Flags().IntVar(&days, "days", int(linktls.DefaultLeafLifetime/(24*time.Hour)), "how long the certificate is valid, days")
	_ = cmd.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{linktls.RoleRelay, linktls.RoleClient}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func caRevokeCmd() *cobra.Command {
	var dir, consulAddr, consulToken string
	cmd := &cobra.Command{
		Use:   "revoke [CERT...]",
		Short: "Revoke identities: write the CA's revocation list, which relays re-read",
		Long: `Add each certificate to the CA's revocation list, --dir/revoked.crl, signed
by the CA. Copy it to every relay (identity.crl, --identity-crl), or with
--consul publish it in the fleet's Consul (relays registered there read it):
each relay re-reads it within 10 s and then refuses the revoked relay or user
on new and pooled links and admin connections. A list never un-revokes. Without a
certificate, the list is signed afresh (it is valid 30 days; a relay keeps
honouring an expired list, and warns).`,
		Example: `  relayctl ca revoke --dir ~/relaymesh-ca ~/relaymesh-ca/osaka.crt
  for h in tokyo singapore; do scp ~/relaymesh-ca/revoked.crl $h:/etc/relaymesh/identity/; done`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ca, err := loadCA(dir)
			if err != nil {
				return err
			}
			crlPath := filepath.Join(dir, caCRLFile)
			prev, err := os.ReadFile(crlPath)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			var certs [][]byte
			for _, a := range args {
				b, err := os.ReadFile(a)
				if err != nil {
					return err
				}
				certs = append(certs, b)
			}
			crl, err := ca.Revoke(prev, certs...)
			if err != nil {
				return err
			}
			if err := os.WriteFile(crlPath, crl, 0o644); err != nil {
				return err
			}
			if consulAddr == "" {
				fmt.Fprintf(cmd.OutOrStdout(), "%s written (%d certificate(s) added): copy it to every relay's identity.crl, or publish it with --consul\n", crlPath, len(args))
				return nil
			}
			if err := registry.PublishCRL(cmd.Context(), consulAddr, consulToken, crl); err != nil {
				return fmt.Errorf("%s written, but not published: %w", crlPath, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s written (%d certificate(s) added) and published in Consul at %s (%s)\n", crlPath, len(args), consulAddr, registry.ConsulCRLKey)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".", "the CA's directory (relayctl ca init)")
	cmd.Flags().StringVar(&consulAddr, "consul", "", "also publish the list in Consul at this agent HTTP address (e.g. 127.0.0.1:8500)")
	cmd.Flags().StringVar(&consulToken, "consul-token", "", "Consul ACL token with key:write on "+registry.ConsulCRLKey+" (default $CONSUL_HTTP_TOKEN; flags show in ps)")
	return cmd
}

// loadCA reads the CA in dir.
func loadCA(dir string) (*linktls.CA, error) {
	cert, err := os.ReadFile(filepath.Join(dir, caCertFile))
	if err != nil {
		return nil, fmt.Errorf("%w (make a CA with relayctl ca init --dir %s)", err, dir)
	}
	key, err := os.ReadFile(filepath.Join(dir, caKeyFile))
	if err != nil {
		return nil, fmt.Errorf("%w: issuing and revoking need the CA's key, which stays on the operator's machine", err)
	}
	return linktls.LoadCA(cert, key)
}

// writeNew writes b to a file that must not exist yet, with mode perm.
func writeNew(path string, b []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s already exists: not overwritten", path)
		}
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
