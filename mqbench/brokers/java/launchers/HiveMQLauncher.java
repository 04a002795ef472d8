// Starts an embedded HiveMQ Community Edition broker and runs until SIGTERM.
//
// Written by mqbench (mqbench/brokers/definitions/hivemq.py); run as a single-file source program:
//   java -cp '<hivemq jars>/*' HiveMQLauncher.java <config dir> <data dir> <extensions dir>
// The config directory holds HiveMQ's config.xml, which is validated against the config.xsd
// inside HiveMQ's jar first: HiveMQ itself logs an unreadable or invalid config.xml and then
// starts with its built-in default (listener 0.0.0.0:1883, usage statistics on), which must
// never happen on a benchmark machine. Prints
// "mqbench-launcher ready broker=hivemq version=<v>" once the broker has started, exits 1
// with the cause when it cannot start, and stops the broker on SIGTERM/SIGINT.

import com.hivemq.embedded.EmbeddedHiveMQ;
import java.net.URL;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import javax.xml.XMLConstants;
import javax.xml.transform.stream.StreamSource;
import javax.xml.validation.SchemaFactory;

public class HiveMQLauncher {
    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: HiveMQLauncher <config dir> <data dir> <extensions dir>");
            System.exit(2);
        }
        validateConfig(Path.of(args[0], "config.xml"));
        EmbeddedHiveMQ hivemq = EmbeddedHiveMQ.builder()
                .withConfigurationFolder(Path.of(args[0]))
                .withDataFolder(Path.of(args[1]))
                .withExtensionsFolder(Path.of(args[2]))
                .build();
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                hivemq.stop().get(10, TimeUnit.SECONDS);
            } catch (Exception e) {
                System.err.println("mqbench-launcher: stop failed: " + e);
            }
            stopped.countDown();
        }, "mqbench-shutdown"));
        try {
            hivemq.start().join();
        } catch (Exception e) {
            fail("hivemq failed to start", e);
        }
        String version = EmbeddedHiveMQ.class.getPackage().getImplementationVersion();
        System.out.println("mqbench-launcher ready broker=hivemq version="
                + (version == null ? "unknown" : version));
        System.out.flush();
        stopped.await();
    }

    /** Exit 1 unless config.xml is valid against the schema HiveMQ reads it with. */
    static void validateConfig(Path config) {
        URL xsd = EmbeddedHiveMQ.class.getClassLoader().getResource("config.xsd");
        if (xsd == null) {
            fail("config.xsd is not in the HiveMQ jar", new IllegalStateException("no config.xsd"));
        }
        try {
            SchemaFactory.newInstance(XMLConstants.W3C_XML_SCHEMA_NS_URI)
                    .newSchema(xsd)
                    .newValidator()
                    .validate(new StreamSource(config.toFile()));
        } catch (Exception e) {
            fail("invalid " + config + " (HiveMQ would fall back to its default config)", e);
        }
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
