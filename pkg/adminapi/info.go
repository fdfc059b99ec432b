package adminapi

import "github.com/relaymesh/relaymesh/pkg/hostnet"

// Limits are a relay's socket limits, /v1/info's "limits": the sysctls
// that bound the windows its segments can have (hostnet.ReadLimits).
type Limits = hostnet.SocketLimits

// Info is what /v1/info answers (and /v1/probe?info=1 carries as "info"):
// the relay's identity and chain, its socket limits, and what it learnt of
// its path to the asker.
//
// The planner's fields, read by pkg/survey into the model: Limits'
// WindowBytesApprox and TCPWmemMaxBytes, CapacityBps, CongestionControl
// (else Limits.CongestionControl), MaxStripes and the Learnt ones. A UDP ask's reply
// carries exactly those (pkg/udpask encodes and decodes this type).
//
// The fields are in the order of their JSON keys: /v1/info was a map,
// encoded with its keys sorted, and this order keeps its bytes.
type Info struct {
	Active int `json:"active"` // tunnels open now
	// CapacityBps is the declared capacity, bits/s; 0: not declared.
	CapacityBps float64 `json:"capacity_bps"`
	// CongestionControl is what the relay sends with on relay links (and
	// to the clients of its relay listener): relay_socket.congestion,
	// else the system default. Relays before it had only
	// Limits.CongestionControl.
	CongestionControl string `json:"congestion_control"`
	Fleet             string `json:"fleet"` // the fleet file, "" with Consul
	HTTP              string `json:"http"`  // the HTTP proxy listener's address
	// LearntLossToYou is the share of what the relay's tunnels sent to
	// the asker's host that went again, and LearntLossAgeSec how long
	// ago: both nil (the keys absent) when too little went there to tell,
	// and through ?via=. A loss of 0 is an answer.
	LearntLossAgeSec *float64 `json:"learnt_loss_age_s,omitempty"`
	LearntLossToYou  *float64 `json:"learnt_loss_to_you,omitempty"`
	// LearntSendBpsToYou is the best rate the relay's tunnels to the
	// asker's host sustained while the path held them back (pkg/learnt),
	// bits/s, and LearntSendAgeSec how long ago; 0: none learnt, or the
	// request was forwarded (?via=) and the asker is a relay.
	LearntSendAgeSec   float64 `json:"learnt_send_age_s"`
	LearntSendBpsToYou float64 `json:"learnt_send_bps_to_you"`
	Limits             Limits  `json:"limits"`
	// MaxStripes is the most links a segment into this relay may run
	// over (pkg/stripe); absent (0) from a relay without a relay
	// listener, or from before striping.
	MaxStripes int      `json:"max_stripes,omitempty"`
	Name       string   `json:"name"`
	Next       []string `json:"next"` // the configured next hops' names, in order; [] for none
	Region     string   `json:"region"`
	Relay      string   `json:"relay"` // the relay listener's address
	SOCKS      string   `json:"socks"` // the SOCKS5 listener's address
	Version    string   `json:"version"`
}

// LearntLoss is i's learnt loss to the asker and its age, seconds; ok
// false when none was learnt.
func (i Info) LearntLoss() (loss, ageSec float64, ok bool) {
	if i.LearntLossToYou == nil {
		return 0, 0, false
	}
	if i.LearntLossAgeSec != nil {
		ageSec = *i.LearntLossAgeSec
	}
	return *i.LearntLossToYou, ageSec, true
}

// SetLearntLoss sets i's learnt loss to the asker and its age, seconds.
func (i *Info) SetLearntLoss(loss, ageSec float64) {
	i.LearntLossToYou, i.LearntLossAgeSec = &loss, &ageSec
}
