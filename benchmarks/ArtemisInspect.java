// What a running Artemis broker holds: its consumers, sessions and connections as Artemis's
// own management views list them (run on demand by benchmarks/session_takeover.py --inspect;
// docs/findings.md, "Artemis loses messages at QoS 1 after rapid reconnects").
//
//   javac -d <dir> benchmarks/ArtemisInspect.java && java -cp <dir> ArtemisInspect <pid>
//
// Attaches to the broker's JVM (same user), starts its local JMX agent and calls the broker
// MBean's listConsumers, listSessions and listConnections (no filter, page 1 of 1000).
// The broker must run with JMX management on (mqbench's broker.xml has it off;
// session_takeover.py --inspect turns it on). Prints one JSON object on one line:
//   {"consumers": <view>, "sessions": <view>, "connections": <view>, "errors": [...]}
// where each view is Artemis's {"data": [...], "count": n}, or null with the reason in errors.
// Exits 1 when no Artemis broker MBean is registered.

import com.sun.tools.attach.VirtualMachine;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public class ArtemisInspect {
    static final String[] VIEWS = {"listConsumers", "listSessions", "listConnections"};
    static final String[] KEYS = {"consumers", "sessions", "connections"};
    // No filter; the views read every key (a missing one is a NullPointerException).
    static final String OPTIONS = "{\"field\": \"\", \"operation\": \"\", \"value\": \"\","
            + " \"sortOrder\": \"asc\", \"sortColumn\": \"id\", \"sortField\": \"id\"}";

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: ArtemisInspect <pid>");
            System.exit(2);
        }
        String url;
        VirtualMachine vm = VirtualMachine.attach(args[0]);
        try {
            url = vm.startLocalManagementAgent();
        } finally {
            vm.detach();
        }
        try (JMXConnector connector = JMXConnectorFactory.connect(new JMXServiceURL(url))) {
            MBeanServerConnection server = connector.getMBeanServerConnection();
            Set<ObjectName> brokers =
                    server.queryNames(new ObjectName("org.apache.activemq.artemis:broker=*"), null);
            if (brokers.isEmpty()) {
                System.err.println("no Artemis broker MBean: is JMX management on?");
                System.exit(1);
            }
            ObjectName broker = brokers.iterator().next();
            List<String> errors = new ArrayList<>();
            StringBuilder out = new StringBuilder("{");
            for (int i = 0; i < VIEWS.length; i++) {
                String view;
                try {
                    view = (String) server.invoke(broker, VIEWS[i], new Object[] {OPTIONS, 1, 1000},
                            new String[] {"java.lang.String", "int", "int"});
                } catch (Exception e) {
                    view = "null";
                    errors.add(quote(VIEWS[i] + ": " + e));
                }
                out.append('"').append(KEYS[i]).append("\": ").append(view).append(", ");
            }
            out.append("\"errors\": [").append(String.join(", ", errors)).append("]}");
            System.out.println(out);
        }
    }

    static String quote(String text) {
        StringBuilder quoted = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                quoted.append('\\').append(c);
            } else if (c < 0x20) {
                quoted.append(String.format("\\u%04x", (int) c));
            } else {
                quoted.append(c);
            }
        }
        return quoted.append('"').toString();
    }
}
