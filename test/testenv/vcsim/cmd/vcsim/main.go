// Command vcsim serves govmomi's vCenter simulator (the simulator package's VPX model) from a
// process of its own, for package test/testenv/vcsim. It serves the SDK over TLS on the
// certificate and key it is given, accepts exactly one username and password, writes its
// addresses to the -state file (JSON, written once it listens) and serves until SIGTERM or
// SIGINT.
//
// Its admin endpoint, plain HTTP on loopback, reads and changes the simulator from inside the
// process, through the simulator's internal session, so that asking never opens a session of
// its own or counts a call:
//
//	GET  /sessions            the live sessions: [{"key","userName","callCount"}]
//	POST /sessions/terminate  ends every live session server-side; answers how many
//	POST /fault?method=M&fault=F&count=N  the next N calls (0: all) of method M answer fault F
//	                                      (SystemError, NotAuthenticated or NoPermission)
//	DELETE /fault             no more injected faults
//	POST /host?name=H&action=A  runs a task on host H and waits for it: A is disconnect
//	                            (DisconnectHost_Task), reconnect (ReconnectHost_Task),
//	                            enterMaintenance or exitMaintenance (Enter/ExitMaintenanceMode_Task)
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// State is what the command writes to the -state file once it serves.
type State struct {
	URL   string `json:"url"`   // the SDK URL, https://127.0.0.1:port/sdk
	Admin string `json:"admin"` // the admin endpoint, host:port
}

// Session is one live session, as GET /sessions answers it.
type Session struct {
	Key       string `json:"key"`
	UserName  string `json:"userName"`
	CallCount int64  `json:"callCount"`
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address of the SDK endpoint")
	certFile := flag.String("cert", "", "PEM serving certificate (required)")
	keyFile := flag.String("key", "", "PEM key of the serving certificate (required)")
	username := flag.String("username", "", "the one accepted username (required)")
	passwordFile := flag.String("password-file", "", "file holding the one accepted password (required)")
	datacenters := flag.Int("datacenters", 1, "datacenters of the model (DC0, DC1, ...)")
	statePath := flag.String("state", "", "where to write the state JSON (required)")
	flag.Parse()
	if *certFile == "" || *keyFile == "" || *username == "" || *passwordFile == "" || *statePath == "" {
		log.Fatal("vcsim: -cert, -key, -username, -password-file and -state are required")
	}
	pw, err := os.ReadFile(*passwordFile)
	if err != nil {
		log.Fatalf("vcsim: %v", err)
	}
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		log.Fatalf("vcsim: serving certificate: %v", err)
	}

	model := simulator.VPX()
	model.Datacenter = *datacenters
	if err := model.Create(); err != nil {
		log.Fatalf("vcsim: create model: %v", err)
	}
	defer model.Remove()
	model.Service.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	model.Service.Listen = &url.URL{Host: *listen, User: url.UserPassword(*username, string(pw))}
	server := model.Service.NewServer()
	defer server.Close()

	// The in-process client runs on the simulator's internal session: it is in no session list.
	ctx := context.Background()
	admin, err := vim25.NewClient(ctx, model.Service)
	if err != nil {
		log.Fatalf("vcsim: in-process client: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatalf("vcsim: admin endpoint: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sessions", func(w http.ResponseWriter, r *http.Request) {
		list, err := sessions(r.Context(), admin)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(list)
	})
	mux.HandleFunc("POST /sessions/terminate", func(w http.ResponseWriter, r *http.Request) {
		list, err := sessions(r.Context(), admin)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req := types.TerminateSession{This: *admin.ServiceContent.SessionManager}
		for _, s := range list {
			req.SessionId = append(req.SessionId, s.Key)
		}
		if len(req.SessionId) > 0 {
			if _, err := methods.TerminateSession(r.Context(), admin, &req); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		log.Printf("vcsim: terminated %d sessions", len(req.SessionId))
		_ = json.NewEncoder(w).Encode(len(req.SessionId))
	})
	mux.HandleFunc("POST /fault", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		method := q.Get("method")
		count, err := strconv.Atoi(q.Get("count"))
		if method == "" || err != nil || count < 0 {
			http.Error(w, "method and count (0: unlimited) are required", http.StatusBadRequest)
			return
		}
		rule := &simulator.FaultInjectionRule{
			MethodName: method, ObjectType: "*", ObjectName: "*", Probability: 1, MaxCount: count,
			Message: "injected fault", Enabled: true,
		}
		switch kind := q.Get("fault"); kind {
		case "SystemError":
			rule.FaultType, rule.Fault = simulator.FaultTypeCustom, &types.SystemError{Reason: "injected by the test"}
		case "NotAuthenticated":
			rule.FaultType = simulator.FaultTypeNotAuthenticated
		case "NoPermission":
			rule.FaultType = simulator.FaultTypeNoPermission
		default:
			http.Error(w, "fault must be SystemError, NotAuthenticated or NoPermission", http.StatusBadRequest)
			return
		}
		model.Service.AddFaultRule(rule)
		log.Printf("vcsim: %s answers %s from now on (count %d, 0: unlimited)", method, q.Get("fault"), count)
	})
	mux.HandleFunc("DELETE /fault", func(w http.ResponseWriter, r *http.Request) {
		model.Service.ClearFaultRules()
		log.Printf("vcsim: no more injected faults")
	})
	mux.HandleFunc("POST /host", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if err := hostAction(r.Context(), admin, q.Get("name"), q.Get("action")); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		log.Printf("vcsim: host %s: %s done", q.Get("name"), q.Get("action"))
	})
	go func() { _ = http.Serve(ln, mux) }()

	b, err := json.Marshal(State{URL: server.URL.String(), Admin: ln.Addr().String()})
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*statePath+".new", b, 0o600); err != nil {
		log.Fatal(err)
	}
	if err := os.Rename(*statePath+".new", *statePath); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("vcsim: serving %s (admin %s)\n", server.URL.Host, ln.Addr())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	log.Print("vcsim: stopping")
}

// sessions lists the live sessions from the SessionManager's sessionList.
func sessions(ctx context.Context, c *vim25.Client) ([]Session, error) {
	req := types.RetrievePropertiesEx{
		This: c.ServiceContent.PropertyCollector,
		SpecSet: []types.PropertyFilterSpec{{
			ObjectSet: []types.ObjectSpec{{Obj: *c.ServiceContent.SessionManager}},
			PropSet:   []types.PropertySpec{{Type: "SessionManager", PathSet: []string{"sessionList"}}},
		}},
	}
	res, err := methods.RetrievePropertiesEx(ctx, c, &req)
	if err != nil {
		return nil, err
	}
	var sm mo.SessionManager
	if res.Returnval != nil && len(res.Returnval.Objects) == 1 {
		if err := mo.LoadObjectContent(res.Returnval.Objects, &sm); err != nil {
			return nil, err
		}
	}
	list := []Session{}
	for _, s := range sm.SessionList {
		list = append(list, Session{Key: s.Key, UserName: s.UserName, CallCount: s.CallCount})
	}
	return list, nil
}

// hostAction runs the task action on the host named name and waits for it.
func hostAction(ctx context.Context, c *vim25.Client, name, action string) error {
	v, err := view.NewManager(c).CreateContainerView(ctx, c.ServiceContent.RootFolder, []string{"HostSystem"}, true)
	if err != nil {
		return err
	}
	defer func() { _ = v.Destroy(ctx) }()
	var hosts []mo.HostSystem
	if err := v.RetrieveWithFilter(ctx, []string{"HostSystem"}, []string{"name"}, &hosts, property.Match{"name": name}); err != nil {
		return fmt.Errorf("host %q: %w", name, err)
	}
	h := object.NewHostSystem(c, hosts[0].Reference())
	var task *object.Task
	switch action {
	case "disconnect":
		task, err = h.Disconnect(ctx)
	case "reconnect":
		task, err = h.Reconnect(ctx, nil, nil)
	case "enterMaintenance":
		task, err = h.EnterMaintenanceMode(ctx, 0, false, nil)
	case "exitMaintenance":
		task, err = h.ExitMaintenanceMode(ctx, 0)
	default:
		return fmt.Errorf("action %q: want disconnect, reconnect, enterMaintenance or exitMaintenance", action)
	}
	if err != nil {
		return err
	}
	return task.Wait(ctx)
}
