package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/relaymesh/relaymesh/pkg/envvar"
	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/relay"
)

func caCmd() *cobra.Command {
	var secretFile string
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Print the fleet CA certificate (PEM), for tools that read the relays' admin APIs over HTTPS",
		Long: `Print the certificate of the fleet CA, which every holder of the fleet secret
derives alike. Relays present certificates from it on their relay links and on
their admin APIs (transport: tls). relayd and relayctl verify them from the
secret; other tools (Prometheus, curl) need this certificate, which is public.
A relay's certificate names the relay (as a DNS name when the name is one), so
a tool that checks host names is told the relay's name as the server name.`,
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
				return errors.New("--fleet-secret-file is required (the CA is derived from the fleet secret)")
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
	return cmd
}
