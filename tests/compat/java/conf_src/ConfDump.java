import java.io.BufferedInputStream;
import java.io.FileInputStream;
import java.io.InputStream;
import java.lang.reflect.Method;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.namesrv.NamesrvConfig;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/** ConfDump broker|namesrv [file]: the config objects RocketMQ 4.9.8's BrokerStartup / NamesrvStartup fill
 * from a properties file (defaults when none), as "Class key=value" lines, one per property setter. */
public class ConfDump {
    static void dump(Object o, Properties p, StringBuilder out) throws Exception {
        MixAll.properties2Object(p, o);
        TreeMap<String, String> kv = new TreeMap<>();
        for (Method m : o.getClass().getMethods()) {
            String n = m.getName();
            if (!n.startsWith("set") || m.getParameterTypes().length != 1) {
                continue;
            }
            String cn = m.getParameterTypes()[0].getSimpleName();
            if (!cn.matches("int|Integer|long|Long|double|Double|boolean|Boolean|float|Float|String")) {
                continue;
            }
            String key = n.substring(3, 4).toLowerCase() + n.substring(4);
            String cap = n.substring(3);
            Object v = null;
            for (String g : new String[] {"get" + cap, "is" + cap, key}) {
                try {
                    v = o.getClass().getMethod(g).invoke(o);
                    break;
                } catch (NoSuchMethodException e) {
                    // next spelling
                }
            }
            kv.put(key, String.valueOf(v));
        }
        for (java.util.Map.Entry<String, String> e : kv.entrySet()) {
            out.append(o.getClass().getSimpleName()).append(' ').append(e.getKey()).append('=')
                .append(e.getValue().replace("\\", "\\\\").replace("\n", "\\n")).append('\n');
        }
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        if (args.length > 1) {
            try (InputStream in = new BufferedInputStream(new FileInputStream(args[1]))) {
                p.load(in);
            }
        }
        StringBuilder out = new StringBuilder();
        NettyServerConfig server = new NettyServerConfig();
        if (args[0].equals("broker")) {
            server.setListenPort(10911);  // BrokerStartup's default before the file
            dump(new BrokerConfig(), p, out);
            dump(new MessageStoreConfig(), p, out);
            dump(server, p, out);
            dump(new NettyClientConfig(), p, out);
        } else {
            server.setListenPort(9876);  // NamesrvStartup's default before the file
            dump(new NamesrvConfig(), p, out);
            dump(server, p, out);
        }
        System.out.print(out);
    }
}
