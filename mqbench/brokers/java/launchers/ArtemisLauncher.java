// Starts an embedded ActiveMQ Artemis broker from a broker.xml and runs until SIGTERM.
//
// Written by mqbench (mqbench/brokers/definitions/artemis.py); run as a single-file source program:
//   java -cp '<artemis jars>/*' ArtemisLauncher.java <broker.xml>
// Prints "mqbench-launcher ready broker=artemis version=<v>" once the server is active,
// exits 1 with the cause when it cannot start, and stops the server on SIGTERM/SIGINT.

import java.io.File;
import java.util.concurrent.CountDownLatch;
import org.apache.activemq.artemis.core.server.ActiveMQServer;
import org.apache.activemq.artemis.core.server.embedded.EmbeddedActiveMQ;
import org.apache.activemq.artemis.utils.VersionLoader;

public class ArtemisLauncher {
    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: ArtemisLauncher <broker.xml>");
            System.exit(2);
        }
        File config = new File(args[0]);
        if (!config.isFile()) {
            System.err.println("mqbench-launcher: no such file: " + config);
            System.exit(2);
        }
        EmbeddedActiveMQ embedded = new EmbeddedActiveMQ();
        embedded.setConfigResourcePath(config.toURI().toASCIIString());
        CountDownLatch stopped = new CountDownLatch(1);
        try {
            embedded.createActiveMQServer();
            ActiveMQServer server = embedded.getActiveMQServer();
            server.registerActivationFailureListener(cause -> {
                fail("artemis failed to activate", cause);
            });
            Runtime.getRuntime().addShutdownHook(new Thread(() -> {
                try {
                    embedded.stop();
                } catch (Exception e) {
                    System.err.println("mqbench-launcher: stop failed: " + e);
                }
                stopped.countDown();
            }, "mqbench-shutdown"));
            embedded.start();
            if (!server.isActive()) {
                System.err.println("mqbench-launcher: artemis started but is not active");
                System.exit(1);
            }
        } catch (Exception e) {
            fail("artemis failed to start", e);
        }
        System.out.println("mqbench-launcher ready broker=artemis version="
                + VersionLoader.getVersion().getFullVersion());
        System.out.flush();
        stopped.await();
    }

    /** Stack trace first, then one summary line (the last line of the log) and exit 1. */
    static void fail(String what, Throwable error) {
        error.printStackTrace();
        Throwable root = error;
        while (root.getCause() != null && root.getCause() != root) {
            root = root.getCause();
        }
        String summary = "mqbench-launcher: " + what + ": " + error;
        if (root != error) {
            summary += " (cause: " + root + ")";
        }
        summary = summary.replace('\n', ' ');
        if (summary.length() > 600) {
            summary = summary.substring(0, 600) + " ...";
        }
        System.err.println(summary);
        System.err.flush();
        Runtime.getRuntime().halt(1);
    }
}
