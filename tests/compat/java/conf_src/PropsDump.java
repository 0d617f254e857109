import java.io.BufferedInputStream;
import java.io.FileInputStream;
import java.io.InputStream;
import java.util.Properties;
import java.util.TreeSet;

/** Loads each file named on the command line with java.util.Properties (as RocketMQ's startup classes
 * do: load(InputStream), ISO-8859-1) and prints its entries, every string as hex UTF-16 units. */
public class PropsDump {
    static String hex(String s) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < s.length(); i++) {
            b.append(String.format("%04x", (int) s.charAt(i)));
        }
        return b.toString();
    }

    public static void main(String[] args) throws Exception {
        StringBuilder out = new StringBuilder();
        for (String f : args) {
            out.append("FILE ").append(f).append('\n');
            Properties p = new Properties();
            try (InputStream in = new BufferedInputStream(new FileInputStream(f))) {
                p.load(in);
            } catch (IllegalArgumentException e) {
                out.append("ERR\n");
                continue;
            }
            for (String k : new TreeSet<>(p.stringPropertyNames())) {
                out.append("E ").append(hex(k)).append(' ').append(hex(p.getProperty(k))).append('\n');
            }
        }
        System.out.print(out);
    }
}
